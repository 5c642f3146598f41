"""The one settings mechanism: a pydantic-settings model, its table of flags, and its parts.

Every setting and argument of every command is a field of a :class:`FlagSettings` model, read
from its ``CITEMON_*`` environment variable (unless it is flag only, below), and (if it has one)
set by the flag of its :class:`Flag` row in the model's ``FLAGS`` table. Precedence, highest
first: the flag, the variable, the default.
A model may nest others as *parts* (``citemon run``'s settings hold ``settings.judge`` and
``settings.scoring``): each part reads its own variables and adds its own flags, so one model
describes a whole command. It lives in the bottom layer because the judges, the engine and the
service each define a model on it.

How a flag and its variable behave (the same for all):

* the variable's raw text, read through pydantic-settings (:meth:`FlagSettings.environment`),
  is the flag's argparse default, so argparse converts it as it converts the flag: a bad value
  in either is a usage error (exit 2) naming the flag and the variable, before anything starts;
* empty text is passed to the model as it is (not converted): the model reads ``""`` as unset
  where that makes sense (``CITEMON_RESULTS_TOPIC=``, ``CITEMON_JUDGE_THRESHOLD=``); a flag
  only row's is converted as any other text (``--limit ""`` is a usage error);
* a flag's value is therefore always the effective one (``args.<dest>``: flag, else variable,
  else the model's default);
* :meth:`FlagSettings.from_args` builds the model (and its parts) from the flags' values and the
  variables of fields without a flag; a value the model refuses (a range, a combination) is a
  :class:`~citemon._core.errors.ConfigError` naming the field, never echoing the input (secrets);
* a renamed setting keeps its old flag and variable as deprecated aliases (:attr:`Flag.aliases`,
  :attr:`Flag.env_aliases`): they still work, each use logs one warning line naming the new
  spelling, and the new spelling wins when both are given;
* a secret (the Kafka password, the judge's API key, the passage store's password and token)
  follows one rule: a :class:`~pydantic.SecretStr` field read from its variable only, never a
  flag (a flag is seen in ``ps`` and shell history), beside a ``<field>_file`` field (a flag and
  a variable) naming a file that holds it; not both (:func:`one_secret_source`), and the file
  read when the secret is used (:func:`secret_from`), so a rotated file is seen.

What a row can be, beside a flag with a value (all argparse's own, so ``--help`` and the usage
errors read as argparse's): a switch (``kind=bool``), a repeatable flag (``repeat``: a list
field, one item per use), one taking ``nargs`` values at once, a required flag (``required``),
a positional (``positional``: the row's ``flag`` is its name), with a one-letter ``short``
spelling, in a ``--help`` group of its own (``group``; :data:`MAIN` is the parser's own
"options" list). Flags that exclude each other are listed by the model
(:attr:`FlagSettings.EXCLUSIVE`, one :class:`Exclusive` each, ``required`` for "exactly one of").

**Flag only** (``env=False``): a command's per-invocation *query* (inspect's filters, the input
files, ``--trace-id``, compare's versions) has no variable. One set in a shell would silently
filter every later run, and the short names would collide between commands
(``CITEMON_VERSION``, ``CITEMON_SINCE``). Positionals, repeatable and required flags and the
members of an :class:`Exclusive` are always flag only (checked when the row is made or added);
*configuration* (a port, a URL, a format, a log level) has its variable. Every variable names
one field across all models (tests/unit/test_flag_settings.py), and :func:`field_of` tells which
field backs a parser's argument (a test walks every command's parser with it, so a plain
``add_argument`` cannot creep back in).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import weakref
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Final, Self

from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from citemon._core.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = [
    "ENV_PREFIX",
    "MAIN",
    "Exclusive",
    "Flag",
    "FlagSettings",
    "field_of",
    "one_secret_source",
    "parse_duration_s",
    "secret_from",
    "whole_at_least_0",
]

ENV_PREFIX: Final = "CITEMON_"
"""Every variable citemon reads starts with this."""

MAIN: Final = ""
"""A row's ``group`` for the parser's own lists (argparse's "options", "positional arguments")
rather than a titled group."""

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def one_secret_source(value: SecretStr | None, path: Path | None, *, what: str) -> None:
    """For a model validator: a secret given both by its variable and by its file is refused
    (which one was meant cannot be known), naming neither value."""
    if value is not None and path is not None:
        raise ValueError(f"give {what} by env or by file, not both")


def secret_from(value: SecretStr | None, path: Path | None, *, file_flag: str) -> SecretStr | None:
    """The secret from its variable, else from its file (read now, so a rotated file is seen;
    the line end a file usually has is dropped), else None. A file that cannot be read is a
    :class:`ConfigError` naming ``file_flag`` and the reason, never the content."""
    if value is not None:
        return value
    if path is None:
        return None
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {file_flag}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:  # its object is the file's bytes: never chained
        raise ConfigError(f"cannot read {file_flag}: not UTF-8 text (byte {exc.start})") from None
    return SecretStr(text.rstrip("\r\n"))


def parse_duration_s(value: str | float | int) -> float:
    """``"15m"``, ``"900s"``, ``"250ms"``, ``"1h"`` or a bare number of seconds → seconds."""
    if isinstance(value, int | float):
        return float(value)
    found = _DURATION.match(value)
    if not found:
        raise ValueError(f"not a duration: {value!r} (use e.g. 900, 900s, 15m, 1h)")
    return float(found.group(1)) * _UNIT_S[found.group(2)]


def whole_at_least_0(value: str) -> int:
    """A whole number >= 0 (a flag's ``kind``)."""
    number = int(value)
    if number < 0:
        raise ValueError(value)
    return number


_WHAT: Final[dict[Any, str]] = {
    int: "a whole number",
    float: "a number",
    whole_at_least_0: "a whole number >= 0",
}


@dataclass(frozen=True, slots=True)
class Flag:
    """One row of a flag table: ``flag`` sets the model's ``field``.

    ``kind`` converts the flag's (or the variable's) text and raises ``ValueError`` on a bad
    one; ``what`` names what it expects in the error (derived for ``int``, ``float`` and
    :func:`whole_at_least_0`). ``dest`` is the attribute on the parsed arguments (default: the
    model's ``DEST_PREFIX`` and the field, else the flag's name with ``_`` for ``-``).
    """

    flag: str
    field: str
    help: str
    kind: Callable[[str], Any] = str
    choices: tuple[str, ...] | None = None
    what: str | None = None
    dest: str | None = None
    metavar: str | tuple[str, ...] | None = None
    aliases: tuple[str, ...] = ()
    """Deprecated spellings of ``flag``: accepted, not in ``--help``, a warning when used."""
    env_aliases: tuple[str, ...] = ()
    """Deprecated variables of ``field``: read when its own variable is unset, with a warning
    (ignored, with a warning, when it is set)."""
    env: bool = True
    """``False``: flag only, no ``CITEMON_*`` variable (a per-invocation query, see above)."""
    repeat: bool = False
    """Repeatable: each use adds one item to the (list) field; none given is ``[]``."""
    nargs: int | None = None
    """Takes this many values at once (``--reviewers A B``: a tuple field)."""
    short: str | None = None
    """A one-letter spelling shown before ``flag`` (``-o``)."""
    required: bool = False
    positional: bool = False
    """An argument by position: ``flag`` is its name (``"input"``), shown as ``metavar``."""
    group: str | None = None
    """Its ``--help`` group: ``None`` the title :meth:`FlagSettings.add_arguments` is given
    (a positional: :data:`MAIN`), else this title, or :data:`MAIN`."""

    def __post_init__(self) -> None:
        if self.env and (self.repeat or self.required or self.positional or self.nargs):
            # A variable would be a hidden default for a query, and argparse ignores a
            # default for a required argument.
            raise ValueError(
                f"{self.flag}: a repeatable, required, positional or many-valued row is env=False"
            )
        if self.positional and (self.aliases or self.short or self.flag.startswith("-")):
            raise ValueError(f"{self.flag}: a positional has a name, not a flag or aliases")


@dataclass(frozen=True, slots=True)
class Exclusive:
    """Fields whose flags exclude each other (argparse's mutually exclusive group); with
    ``required``, exactly one must be given. Its members are flag only."""

    fields: tuple[str, ...]
    required: bool = False


_FIELD_OF: weakref.WeakKeyDictionary[argparse.Action, tuple[type[FlagSettings], str]] = (
    weakref.WeakKeyDictionary()
)


def field_of(action: argparse.Action) -> tuple[type[FlagSettings], str] | None:
    """The model and field an argument was added for by :meth:`FlagSettings.add_arguments`,
    or None for one added by hand (the test that keeps every flag in a model asks this)."""
    return _FIELD_OF.get(action)


class _OwnVariables(EnvSettingsSource):
    """A model's variables, without its parts' (each part reads its own, by its own names)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        if _part(field.annotation) is not None:
            return None, field_name, False
        model = self.settings_cls
        if issubclass(model, FlagSettings) and field_name in model.flag_only():
            return None, field_name, False  # a query: never from a variable
        return super().get_field_value(field, field_name)


def _part(annotation: Any) -> type[FlagSettings] | None:
    """The model class of a part field (a :class:`FlagSettings` nested in another)."""
    if isinstance(annotation, type) and issubclass(annotation, FlagSettings):
        return annotation
    return None


class FlagSettings(BaseSettings):
    """Base of every settings model: ``CITEMON_*`` variables, plus flags from ``FLAGS``."""

    # hide_input_in_errors: a model built in code (not through from_args, which never echoes)
    # would otherwise print its whole input, secrets included, in a ValidationError.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="ignore",
        validate_default=True,
        frozen=True,
        hide_input_in_errors=True,
    )

    FLAGS: ClassVar[tuple[Flag, ...]] = ()
    """The model's flags, in ``--help`` order."""
    DEST_PREFIX: ClassVar[str | None] = None
    """``args`` attribute of a flag = this + field; ``None``: from the flag's name."""
    TITLE: ClassVar[str] = "settings"
    """The ``--help`` group of the model's flags."""
    EXCLUSIVE: ClassVar[tuple[Exclusive, ...]] = ()
    """The fields whose flags exclude each other."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, _OwnVariables(settings_cls))

    # -- the parts -----------------------------------------------------------------------------

    @classmethod
    def parts(cls) -> dict[str, type[FlagSettings]]:
        """Field → model, for the fields that are parts (``judge``, ``scoring``)."""
        found = {name: _part(info.annotation) for name, info in cls.model_fields.items()}
        return {name: part for name, part in found.items() if part is not None}

    # -- the variables -------------------------------------------------------------------------

    @classmethod
    def env_var(cls, field: str) -> str:
        """The variable that sets ``field`` (its alias, else the prefix and its name)."""
        alias = cls.model_fields[field].validation_alias
        if isinstance(alias, str):
            return alias
        prefix = str(cls.model_config.get("env_prefix", ""))
        return f"{prefix}{field}".upper()

    @classmethod
    def flag_only(cls) -> frozenset[str]:
        """The fields set by their flag only, never by a variable (``Flag.env=False``)."""
        return frozenset(row.field for row in cls.FLAGS if not row.env)

    @classmethod
    def env_vars(cls) -> dict[str, str]:
        """Field → variable, for every field but the parts and the flag-only ones (the
        documentation and the tests read this)."""
        skip = cls.parts().keys() | cls.flag_only()
        return {field: cls.env_var(field) for field in cls.model_fields if field not in skip}

    @classmethod
    def environment(cls) -> dict[str, str]:
        """Field → the raw text of its variable, for the variables that are set (``""`` stays
        ``""``), read by pydantic-settings as the model reads them (prefix, case)."""
        raw = _OwnVariables(cls)()
        out: dict[str, str] = {}
        for field in cls.env_vars():
            for key in (field, cls.env_var(field), cls.env_var(field).lower()):
                if key in raw and isinstance(raw[key], str):
                    out[field] = raw[key]
                    break
        for row in cls.FLAGS:
            for old in row.env_aliases:
                if old not in os.environ:
                    continue
                new = cls.env_var(row.field)
                if row.field in out:
                    log.warning("%s is deprecated and ignored: %s is set", old, new)
                    continue
                log.warning("%s is deprecated: use %s (same meaning)", old, new)
                out[row.field] = os.environ[old]
        return out

    @classmethod
    def _init_key(cls, field: str) -> str:
        alias = cls.model_fields[field].validation_alias
        return alias if isinstance(alias, str) else field

    # -- the flags -----------------------------------------------------------------------------

    @classmethod
    def dest(cls, row: Flag) -> str:
        if row.dest is not None:
            return row.dest
        if cls.DEST_PREFIX is not None:
            return f"{cls.DEST_PREFIX}{row.field}"
        return row.flag.lstrip("-").replace("-", "_")

    @classmethod
    def add_arguments(
        cls,
        parser: argparse.ArgumentParser,
        *,
        title: str | None = None,
        only: Collection[str] | None = None,
        parts: bool = False,
    ) -> None:
        """The model's flags (or those of the fields in ``only``) as one argument group, then,
        with ``parts``, each part's as a group of its own."""
        cls._add_own_arguments(parser, title=title or cls.TITLE, only=only)
        if parts:
            for part in cls.parts().values():
                part.add_arguments(parser, parts=True)

    @classmethod
    def _add_own_arguments(
        cls, parser: argparse.ArgumentParser, *, title: str, only: Collection[str] | None
    ) -> None:
        environment = cls.environment()
        groups: dict[str, _Container] = {}
        exclusive: dict[Exclusive, _Container] = {}
        for row in cls.FLAGS:
            if only is not None and row.field not in only:
                continue
            where = cls._container(parser, row, title, groups, exclusive)
            variable = cls.env_var(row.field) if row.env else None
            text = row.help if variable is None else f"{row.help} [env {variable}]"
            options: dict[str, Any]
            if row.kind is bool:  # a switch: given means on; absent leaves the variable be
                options = {"action": "store_const", "const": True, "default": None}
            else:
                options = {
                    "type": _from_flag_or_variable(row, variable),
                    "choices": row.choices,
                    "metavar": row.metavar,
                }
                if row.repeat:
                    options |= {"action": "append", "default": []}
                else:
                    default = cls.model_fields[row.field].default
                    options["default"] = environment.get(row.field, default)
            if row.required:
                options["required"] = True
            if row.nargs is not None:
                options["nargs"] = row.nargs
            if row.positional:
                action = where.add_argument(cls.dest(row), help=text, **options)
            else:
                if row.kind is not bool and row.metavar is None and not row.choices:
                    options["metavar"] = _metavar(row.flag)
                spellings = (row.flag,) if row.short is None else (row.short, row.flag)
                action = where.add_argument(*spellings, dest=cls.dest(row), help=text, **options)
            _FIELD_OF[action] = (cls, row.field)
            for alias in row.aliases:
                # Hidden, and without a default of its own: the new flag's stands.
                switch = row.kind is bool
                converted: dict[str, Any] = (
                    {} if switch else {"type": _from_flag_or_variable(row, variable)}
                )
                hidden = where.add_argument(
                    alias,
                    dest=cls.dest(row),
                    action=_deprecated(row.flag, switch=switch),
                    choices=row.choices,
                    default=argparse.SUPPRESS,
                    help=argparse.SUPPRESS,
                    **converted,
                )
                _FIELD_OF[hidden] = (cls, row.field)

    @classmethod
    def _container(
        cls,
        parser: argparse.ArgumentParser,
        row: Flag,
        title: str,
        groups: dict[str, _Container],
        exclusive: dict[Exclusive, _Container],
    ) -> _Container:
        """Where ``row``'s argument goes: its group (made on first use, so ``--help`` lists
        the groups in the order of the rows), inside its exclusive group if it has one."""
        name = row.group if row.group is not None else (MAIN if row.positional else title)
        where: _Container = parser
        if name != MAIN:
            if name not in groups:
                groups[name] = parser.add_argument_group(name)
            where = groups[name]
        for rule in cls.EXCLUSIVE:
            if row.field in rule.fields:
                if row.env:
                    raise ValueError(f"{row.flag}: a member of an exclusive group is env=False")
                if rule not in exclusive:
                    exclusive[rule] = where.add_mutually_exclusive_group(required=rule.required)
                return exclusive[rule]
        return where

    @classmethod
    def from_args(cls, args: argparse.Namespace, **overrides: Any) -> Self:
        """The model from the flags' values, the variables of the other fields, ``overrides``.

        Raises :class:`ConfigError` naming the bad field (and never echoing a value).
        """
        given = {
            row.field: getattr(args, cls.dest(row))
            for row in cls.FLAGS
            if getattr(args, cls.dest(row), None) is not None
        }
        for field, part in cls.parts().items():
            if field not in overrides and any(hasattr(args, part.dest(r)) for r in part.FLAGS):
                given[field] = part.from_args(args)  # the part's flags are on this command
        given.update(overrides)
        try:
            # Keyed as the variables are (a field's alias, if it has one), so that a value
            # given here replaces its variable's rather than sitting beside it.
            return cls(**{cls._init_key(field): value for field, value in given.items()})
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}"
                for e in exc.errors(include_input=False)
            )
            raise ConfigError(f"invalid settings: {problems}") from None


_Container = argparse.ArgumentParser | argparse._ArgumentGroup | argparse._MutuallyExclusiveGroup
"""Where an argument can be added (argparse has no public name for its groups)."""


def _metavar(flag: str) -> str:
    """``--max-inflight-answers`` → ``MAX_INFLIGHT_ANSWERS``, whatever the flag's ``dest``."""
    return flag.lstrip("-").upper().replace("-", "_")


def _deprecated(use: str, *, switch: bool) -> type[argparse.Action]:
    """The argparse action of a deprecated flag: stores as ``use`` would, and says so once."""

    class Deprecated(argparse.Action):
        def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
            if switch:
                kwargs["nargs"] = 0
            super().__init__(option_strings, dest, **kwargs)

        def __call__(
            self,
            parser: argparse.ArgumentParser,
            namespace: argparse.Namespace,
            values: Any,
            option_string: str | None = None,
        ) -> None:
            log.warning("%s is deprecated: use %s (same meaning)", option_string, use)
            setattr(namespace, self.dest, True if switch else values)

    return Deprecated


def _from_flag_or_variable(row: Flag, variable: str | None) -> Callable[[str], Any]:
    """An argparse ``type`` whose error names the variable too: argparse converts a string
    default as it converts a flag, so a bad variable is the same usage error as a bad flag."""
    what = row.what or _WHAT.get(row.kind, f"a valid {row.flag.lstrip('-')}")
    source = "from the flag" if variable is None else f"from the flag or {variable}"

    def convert(value: str) -> Any:
        if value == "" and variable is not None:
            # Set but empty: the model decides (most fields: "unset"). A flag-only row has no
            # variable to leave unset: its empty text is converted (an error naming the flag).
            return value
        try:
            return row.kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not {what} ({source})") from None

    convert.__name__ = getattr(row.kind, "__name__", "value")
    return convert
