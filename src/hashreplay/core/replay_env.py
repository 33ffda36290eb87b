"""Keyless replay (docs/design.md §12): in replay mode, well-known provider key variables that
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
    "GEMINI_API_KEY": PLACEHOLDER,
    "GOOGLE_API_KEY": PLACEHOLDER,
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


def replay_env_values(setting: bool | Mapping[str, str]) -> dict[str, str]:
    """The variables `replay_env` provides: `true` the defaults, `false` none, a table the
    defaults plus (or overriding) its entries; an entry set to `""` is left out."""
    if setting is False:
        return {}
    values = dict(DEFAULT_REPLAY_ENV)
    if isinstance(setting, Mapping):
        values.update(setting)
    return {name: value for name, value in values.items() if value}


def missing(values: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """The placeholders to set: only variables the environment does not have."""
    return {name: value for name, value in values.items() if not env.get(name)}
