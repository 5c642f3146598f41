// The specimen answered by real JavaScript agents, traced by their real instrumentations, with
// only the LLM faked: the Vercel AI SDK (`generateText`, `streamText` and `ToolLoopAgent` with
// `experimental_telemetry`), a LangGraph.js ReAct agent and LangChain.js's `createAgent` under
// OpenInference's LangChain.js instrumentation. Each agent's search tool returns the specimen's
// three passages; the model answers citing [p-3310] [p-3310] [p-3312] (claims 2 and 3 cite the
// wrong passage).
//
//   node tests/js/agents.mjs OUT_DIR
//
// writes OUT_DIR/<case>.json and OUT_DIR/<case>.pb, one ExportTraceServiceRequest per case in
// OTLP/JSON (hex IDs) and in protobuf, as @opentelemetry/otlp-transformer serialises the finished
// spans for the OTLP/HTTP exporters. The dependencies are tests/js/package-lock.json's
// (`make js-traces`).
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { LangChainInstrumentation } from "@arizeai/openinference-instrumentation-langchain";
import * as CallbackManagerModule from "@langchain/core/callbacks/manager";
import { Document } from "@langchain/core/documents";
import { AIMessage } from "@langchain/core/messages";
import { BaseRetriever } from "@langchain/core/retrievers";
import { fakeModel } from "@langchain/core/testing";
import { tool as lcTool } from "@langchain/core/tools";
import { createReactAgent } from "@langchain/langgraph/prebuilt";
import { JsonTraceSerializer, ProtobufTraceSerializer } from "@opentelemetry/otlp-transformer";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { generateText, simulateReadableStream, stepCountIs, streamText, tool, ToolLoopAgent } from "ai";
import { MockLanguageModelV3 } from "ai/test";
import { createAgent } from "langchain";
import { z } from "zod";

const QUESTION = "How long do we keep audit logs, and can I extend it?";
const PASSAGES = [
  { id: "p-3310", text: "Audit log retention is 90 days on the Business plan and 365 days on Enterprise." },
  {
    id: "p-3311",
    text: "Retention cannot be configured from the dashboard. Contact your account manager to discuss extensions.",
  },
  {
    id: "p-3312",
    text: "Enterprise agreements may include custom data retention terms negotiated at contract signing.",
  },
];
const ANSWER =
  "Audit logs are retained for 90 days on the Business plan. [p-3310] " +
  "Retention can be extended through a custom term in an Enterprise agreement. [p-3310] " +
  "Changing it is not possible from the dashboard. [p-3312]";
// The same answer citing by number: the passages' positions across both searches, as the model
// saw them (its tool returns no IDs).
const NUMBERED_ANSWER = ANSWER.replaceAll("[p-3310]", "[1]").replaceAll("[p-3312]", "[3]");
// The two-search case's queries: the first finds p-3310 and p-3311, the second p-3312.
const RETENTION_QUERY = "audit log retention period";
const EXTEND_QUERY = "extend retention enterprise agreement";
// Said beside the tool call, in the model's first turn: an intermediate turn, never the answer.
const PREAMBLE = "Let me search the knowledge base.";

const outDir = process.argv[2];
if (!outDir) {
  console.error("usage: node agents.mjs OUT_DIR");
  process.exit(2);
}
mkdirSync(outDir, { recursive: true });

const exporter = new InMemorySpanExporter();
const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ "service.name": "kb-agent", "service.version": "js-1" }),
  spanProcessors: [new SimpleSpanProcessor(exporter)],
});
provider.register();

async function traced(name, run) {
  exporter.reset();
  await run();
  await provider.forceFlush();
  const spans = exporter.getFinishedSpans();
  const body = new TextDecoder().decode(JsonTraceSerializer.serializeRequest(spans));
  writeFileSync(join(outDir, `${name}.json`), body);
  writeFileSync(join(outDir, `${name}.pb`), ProtobufTraceSerializer.serializeRequest(spans));
  console.error(`${name}: ${spans.length} spans`);
}

// -- the Vercel AI SDK ------------------------------------------------------------------------

const usage = {
  inputTokens: { total: 40, noCache: 40, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 30, text: 30, reasoning: 0 },
};

/**
 * The fake model: one search_docs call per query in `queries`, each in a turn of its own once
 * the previous result is in the prompt; then the answer, once every passage is in the prompt.
 */
function searchingModel({ preamble = false, queries = ["audit log retention"], answer = ANSWER } = {}) {
  const turn = (prompt) => {
    const results = prompt.filter((m) => m.role === "tool");
    if (results.length < queries.length) {
      const text = preamble && results.length === 0 ? PREAMBLE : null;
      return { text, call: { id: `call-${results.length + 1}`, query: queries[results.length] } };
    }
    const seen = JSON.stringify(results.map((m) => m.content[0].output));
    if (!PASSAGES.every((p) => seen.includes(p.text))) throw new Error("the model never saw the passages");
    return { text: answer, call: null };
  };
  const toolCall = (call) => ({
    type: "tool-call",
    toolCallId: call.id,
    toolName: "search_docs",
    input: JSON.stringify({ query: call.query }),
  });
  return new MockLanguageModelV3({
    doGenerate: async ({ prompt }) => {
      const { text, call } = turn(prompt);
      const content = [];
      if (text) content.push({ type: "text", text });
      if (call) content.push(toolCall(call));
      const finishReason = call ? { unified: "tool-calls", raw: "tool_calls" } : { unified: "stop", raw: "stop" };
      return { content, finishReason, usage, warnings: [] };
    },
    doStream: async ({ prompt }) => {
      const { text, call } = turn(prompt);
      const chunks = [{ type: "stream-start", warnings: [] }];
      if (text) {
        chunks.push({ type: "text-start", id: "t" });
        // Word by word, as a provider streams it.
        for (const word of text.split(/(?<= )/)) chunks.push({ type: "text-delta", id: "t", delta: word });
        chunks.push({ type: "text-end", id: "t" });
      }
      if (call) chunks.push(toolCall(call));
      const finishReason = call ? { unified: "tool-calls", raw: "tool_calls" } : { unified: "stop", raw: "stop" };
      chunks.push({ type: "finish", finishReason, usage });
      return { stream: simulateReadableStream({ chunks, initialDelayInMs: null, chunkDelayInMs: null }) };
    },
  });
}

// The search tool returns the documents as the application holds them: a JSON list of objects
// with an ID and a text (the SDK records a tool's result JSON-encoded in `ai.toolCall.result`).
// A query about extending retention finds only p-3312 (the two-search case); any other, all three.
const searchDocs = tool({
  description: "Search the product documentation",
  inputSchema: z.object({ query: z.string() }),
  execute: async ({ query }) => {
    const found = query === EXTEND_QUERY ? PASSAGES.slice(2) : query === RETENTION_QUERY ? PASSAGES.slice(0, 2) : PASSAGES;
    return found.map((p) => ({ id: p.id, text: p.text }));
  },
});
// The same search returning texts only: the model can cite them by position alone.
const searchTexts = tool({
  description: "Search the product documentation",
  inputSchema: z.object({ query: z.string() }),
  execute: async (input, options) => (await searchDocs.execute(input, options)).map(({ text }) => ({ text })),
});
// The same search rendering the documents as text for the model (`[p-3310] text` blocks): the SDK
// records the returned string JSON-encoded.
const searchRendered = tool({
  description: "Search the product documentation",
  inputSchema: z.object({ query: z.string() }),
  execute: async (input, options) =>
    (await searchDocs.execute(input, options)).map(({ id, text }) => `[${id}] ${text}`).join("\n\n"),
});
const telemetry = { isEnabled: true, functionId: "kb-answer" };

async function vercelGenerateText({
  preamble = false,
  queries,
  answer = ANSWER,
  search = searchDocs,
  telemetrySettings = telemetry,
} = {}) {
  const result = await generateText({
    model: searchingModel({ preamble, queries, answer }),
    tools: { search_docs: search },
    stopWhen: stepCountIs(5),
    prompt: QUESTION,
    experimental_telemetry: telemetrySettings,
  });
  if (result.text !== answer) throw new Error(`generateText answered ${JSON.stringify(result.text)}`);
}

await traced("vercel-generate-text", () => vercelGenerateText());
// The first turn says something before its tool call: the top span's answer is still the final turn.
await traced("vercel-generate-text-preamble", () => vercelGenerateText({ preamble: true }));
// Two searches before the answer: the passages of both are the answer's, in the order seen.
await traced("vercel-two-searches", () => vercelGenerateText({ queries: [RETENTION_QUERY, EXTEND_QUERY] }));
await traced("vercel-rendered-text", () => vercelGenerateText({ search: searchRendered }));
// The same with texts only, cited by number: [3] is the second search's first passage.
await traced("vercel-numeric-markers", () =>
  vercelGenerateText({ queries: [RETENTION_QUERY, EXTEND_QUERY], answer: NUMBERED_ANSWER, search: searchTexts }),
);
await traced("vercel-content-off", () =>
  vercelGenerateText({ telemetrySettings: { ...telemetry, recordInputs: false, recordOutputs: false } }),
);

await traced("vercel-stream-text", async () => {
  const result = streamText({
    model: searchingModel(),
    tools: { search_docs: searchDocs },
    stopWhen: stepCountIs(5),
    messages: [{ role: "user", content: QUESTION }],
    experimental_telemetry: telemetry,
  });
  const text = await result.text;
  if (text !== ANSWER) throw new Error(`streamText answered ${JSON.stringify(text)}`);
});

await traced("vercel-tool-loop-agent", async () => {
  const agent = new ToolLoopAgent({
    model: searchingModel(),
    tools: { search_docs: searchDocs },
    experimental_telemetry: telemetry,
  });
  const result = await agent.generate({ prompt: QUESTION });
  if (result.text !== ANSWER) throw new Error(`ToolLoopAgent answered ${JSON.stringify(result.text)}`);
});

// -- LangGraph.js, traced by OpenInference ----------------------------------------------------

class KnowledgeBase extends BaseRetriever {
  lc_namespace = ["citemon", "retrievers"];

  async _getRelevantDocuments() {
    return PASSAGES.map((p) => new Document({ id: p.id, pageContent: p.text, metadata: { passage_id: p.id } }));
  }
}

/** LangChain.js's own fake chat model: the tool call, then (having seen the passages) the answer. */
function fakeSearchingModel() {
  return fakeModel()
    .respondWithTools([{ name: "search_docs", args: { query: "audit log retention" }, id: "call-1" }])
    .respond((messages) => {
      const searched = messages.find((m) => m.getType() === "tool");
      if (!searched || !String(searched.content).includes("[p-3312]")) return new Error("the model never saw the passages");
      return new AIMessage(ANSWER);
    });
}

// The retriever tool of LangChain.js's RAG agent tutorials: the retriever's documents rendered
// for the model with their IDs (`[p-3310] text`), so it can cite them.
const knowledgeBase = new KnowledgeBase();
const searchTool = lcTool(
  async ({ query }, config) => {
    const docs = await knowledgeBase.invoke(query, config);
    return docs.map((d) => `[${d.id}] ${d.pageContent}`).join("\n\n");
  },
  { name: "search_docs", description: "Search the product documentation", schema: z.object({ query: z.string() }) },
);

// A tool that queries the store itself (no LangChain retriever): its rendering is all the trace has.
const plainSearchTool = lcTool(
  async () => PASSAGES.map((p) => `[${p.id}] ${p.text}`).join("\n\n"),
  { name: "search_docs", description: "Search the product documentation", schema: z.object({ query: z.string() }) },
);

async function langgraphAgent({ tools = [searchTool] } = {}) {
  const agent = createReactAgent({ llm: fakeSearchingModel(), tools });
  const out = await agent.invoke({ messages: [{ role: "user", content: QUESTION }] });
  const text = out.messages.at(-1).content;
  if (text !== ANSWER) throw new Error(`the LangGraph agent answered ${JSON.stringify(text)}`);
}

// LangChain.js 1.x's agent (createAgent, a LangGraph graph underneath).
async function langchainAgent() {
  const agent = createAgent({ model: fakeSearchingModel(), tools: [searchTool] });
  const out = await agent.invoke({ messages: [{ role: "user", content: QUESTION }] });
  const text = out.messages.at(-1).content;
  if (text !== ANSWER) throw new Error(`the LangChain agent answered ${JSON.stringify(text)}`);
}

// The LangChain.js instrumentation patches the ESM callbacks module by hand (its auto-loader
// hooks only the CommonJS build). A second instrumentation re-patches it (the first is undone).
new LangChainInstrumentation({ tracerProvider: provider }).manuallyInstrument(CallbackManagerModule);
await traced("langgraph-react-agent", () => langgraphAgent());
await traced("langchain-create-agent", langchainAgent);
await traced("langgraph-plain-tool", () => langgraphAgent({ tools: [plainSearchTool] }));

new LangChainInstrumentation({
  tracerProvider: provider,
  traceConfig: { hideInputs: true, hideOutputs: true },
}).manuallyInstrument(CallbackManagerModule);
await traced("langgraph-content-off", () => langgraphAgent());

await provider.shutdown();
