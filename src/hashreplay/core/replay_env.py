"""Keyless replay (docs/design.md §2): in replay mode, well-known provider key variables that
are unset get placeholders, so SDK constructors that demand a key work unchanged. Never in
record or live mode, where a real key must be the user's own."""

from __future__ import annotations

from collections.abc import Mapping

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
