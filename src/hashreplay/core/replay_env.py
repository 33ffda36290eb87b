"""Keyless replay (docs/design.md §2): in replay mode, well-known provider key variables that
are unset get placeholders, so SDK constructors that demand a key work unchanged. Never in
record or live mode, where a real key must be the user's own."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

#: The value every placeholder key has: obviously not a key, in any log or error.
PLACEHOLDER = "hashreplay-replay-placeholder"

#: Variables that SDKs read at construction and refuse to start without.
DEFAULT_REPLAY_ENV: Mapping[str, str] = {
    "OPENAI_API_KEY": PLACEHOLDER,
    "AZURE_OPENAI_API_KEY": PLACEHOLDER,
    "ANTHROPIC_API_KEY": PLACEHOLDER,
    # one of these two only (ALTERNATIVES): google-genai warns on every client it builds
    # when both are set
    "GOOGLE_API_KEY": PLACEHOLDER,
    "GEMINI_API_KEY": PLACEHOLDER,
    "MISTRAL_API_KEY": PLACEHOLDER,
    "CO_API_KEY": PLACEHOLDER,
    "COHERE_API_KEY": PLACEHOLDER,
    "GROQ_API_KEY": PLACEHOLDER,
    "TOGETHER_API_KEY": PLACEHOLDER,
    "FIREWORKS_API_KEY": PLACEHOLDER,
    "DEEPSEEK_API_KEY": PLACEHOLDER,
    "XAI_API_KEY": PLACEHOLDER,
    "OPENROUTER_API_KEY": PLACEHOLDER,
    "PERPLEXITYAI_API_KEY": PLACEHOLDER,
    "VOYAGE_API_KEY": PLACEHOLDER,
    "REPLICATE_API_TOKEN": PLACEHOLDER,
    "HF_TOKEN": PLACEHOLDER,
    # botocore signs requests with these and will not build a client without a region
    "AWS_ACCESS_KEY_ID": "AKIAHASHREPLAYPLACEHOLDER",
    "AWS_SECRET_ACCESS_KEY": PLACEHOLDER,
    "AWS_DEFAULT_REGION": "us-east-1",
}


#: Variables that stand for one another: a placeholder is set for the first of a group only,
#: and only when none of the group is set.
ALTERNATIVES: tuple[frozenset[str], ...] = (frozenset({"GOOGLE_API_KEY", "GEMINI_API_KEY"}),)
_OTHERS: Mapping[str, frozenset[str]] = {
    name: group - {name} for group in ALTERNATIVES for name in group
}


def replay_env_values(setting: bool | Mapping[str, str]) -> dict[str, str]:
    """The variables `replay_env` provides: `true` the defaults, `false` none, a table the
    defaults plus (or overriding) its entries; an entry set to `""` is left out. The table's
    entries come first, so one of them wins over a default it is an alternative to."""
    if setting is False:
        return {}
    values = dict(setting) if isinstance(setting, Mapping) else {}
    values.update({k: v for k, v in DEFAULT_REPLAY_ENV.items() if k not in values})
    return {name: value for name, value in values.items() if value}


def missing(values: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """The placeholders to set: only variables the environment does not have, and none for a
    variable whose alternative is set or about to be."""
    chosen: dict[str, str] = {}
    for name, value in values.items():
        if env.get(name):
            continue
        others = _OTHERS.get(name)
        if others and any(env.get(other) or other in chosen for other in others):
            continue
        chosen[name] = value
    return chosen


#: Words of a variable name that say its value is a credential (not a region or a URL).
_CREDENTIAL_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
#: Placeholders shorter than this are not looked for in requests (they would match by chance).
_MIN_PLACEHOLDER = 8


def placeholder_keys(setting: bool | Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """The placeholder values that stand for credentials, each with the variables that get
    it in replay mode (`AWS_DEFAULT_REGION`'s `us-east-1` is not one)."""
    found: dict[str, list[str]] = {}
    for name, value in replay_env_values(setting).items():
        if len(value) >= _MIN_PLACEHOLDER and any(w in name.upper() for w in _CREDENTIAL_WORDS):
            found.setdefault(value, []).append(name)
    return {value: tuple(names) for value, names in found.items()}


def placeholder_refusal(value: str, names: tuple[str, ...], url: str, mode: str) -> str:
    """Why a request that carries a replay placeholder as its credential is not sent to
    `url` (docs/design.md §7, "Keyless replay's placeholder"): a client made while replaying (a
    session-scoped fixture) keeps the placeholder into a test that records or runs live,
    and the upstream would answer 401 (or a recording would hold that answer)."""
    host = urlsplit(url).hostname or url
    labels = host.lower().split(".")
    own = [n for n in names if _provider_of(n.split("_", 1)[0].lower(), labels)]
    variables = own or list(names)
    shown = ", ".join(variables[:6]) + (", …" if len(variables) > 6 else "")
    which = variables[0] if len(variables) == 1 else f"the provider's key variable ({shown})"
    return (
        f"this request carries the replay placeholder {value!r} as its credential and was "
        f"not sent to {host} ({mode} mode). A client created while replaying (a "
        "session-scoped fixture, a module-level client) keeps the placeholder key that "
        f"keyless replay set. Set {which} to a real key before pytest starts, or create the "
        "client inside the test, then run the test again"
    )


def _provider_of(word: str, labels: list[str]) -> bool:
    """Whether a variable's first word names the host (`anthropic` in `api.anthropic.com`,
    `google` in `googleapis`; a two-letter word only as a whole label)."""
    return any(word == label or (len(word) > 2 and word in label) for label in labels)
