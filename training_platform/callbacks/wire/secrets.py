"""Which parts of a run's metadata are secrets, and how they are hidden (docs/contract.md).

One definition for both sides: the callback masks the run file it writes, and
the platform masks every run file it stores, since an older callback, another
tool or a hand-written file may not have. Masking is idempotent (a masked
value masks to itself), so the platform re-masking our own file changes nothing.

Three kinds of rule:

- **Keys.** A secret-looking key keeps its name and its value becomes `MASK`;
  under a secret key whose value is an object or a list (`secrets`,
  `credentials`, `tokens`, `auth`) every value is masked, numbers included.
  Otherwise numbers, booleans and null are kept (`secret_seed: 42`), except
  under a key that names a password (`password: 123456` is one).
- **Values, whatever their key.** The password of a URL or DSN
  (`postgresql://u:***@db/x`), secret query parameters (`?token=***`), the
  path of a webhook URL, `Bearer ***`, `NAME=value` and `--name value` inside
  a text, and token-shaped substrings (`hf_…`, `sk-…`, `ghp_…`, `xox?-…`,
  `AKIA…`, `glpat-…`, `AIza…`, JWTs). A whole value of 40 lowercase hex
  digits (a W&B API key) is masked unless its key names a commit, hash or
  revision: git commits are 40 hex digits too, and the run file records one.
- **The command line.** `--name value`, `--name=value`, `name=value` (Hydra,
  environment assignments) and `-p value` by the key rules, every other
  argument by the value rules; a number-shaped value is kept like a number.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

MASK: Final = "***"
MAX_DEPTH: Final = 100  # deeper than both sides store (64): masked, never walked

Words = tuple[str, ...]


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


# Matched anywhere in the key (`dbpassword`, `client_secret`, `x-api-key`).
_SECRET_PART = re.compile(
    r"passw(or)?d|passphrase|passcode|secret|credential|api_?keys?|cookie|webhook|private_?key"
)
# Matched as the key's last word (`db_pass`, `http_auth`), so `pass_k`,
# `passes`, `author` and `auth_mode` stay readable.
_SECRET_LAST: Final = frozenset({"pass", "pwd", "auth", "authorization", "sig", "signature"})
_SECRET_WORD: Final = frozenset({"cred", "creds", "dsn"})
# `<word>_key` hides its value unless it names a field of the data (verl's
# `prompt_key`, `reward_fn_key`, `image_key`) rather than a key to something.
_DATA_WORDS: Final = _word_set(
    "prompt response chosen rejected image images video videos audio label labels input"
    " output text answer question query target completion message messages fn data dataset"
    " column field sort cache metric group partition primary foreign rng prng seed index"
    " feature sample tool tools reward source lookup dict"
)
_KEY_PAIRS: Final = _word_set(  # (`access`, `key`): `access_key_id` is one
    "access ssh signing encryption master license client service account"
)
# `<word>_token` names a special token of a tokenizer, not a credential.
_SPECIAL_WORDS: Final = _word_set(
    "pad eos bos unk sep cls mask start end stop image video audio vision special additional"
    " placeholder think answer tool system assistant begin eot eod im fim prefix suffix"
    " middle sentinel newline separator added extra reasoning"
)
# `tokens` alone or `api_tokens` is a set of credentials; `max_tokens` is a count.
_TOKEN_OWNERS: Final = _word_set(
    "api access auth bearer refresh hub hf oauth bot session github gh wandb slack"
)
_NUMERIC_LAST: Final = frozenset({"pass", "pwd", "secret"})
_COMMIT_WORDS: Final = _word_set(
    "commit commits sha sha1 sha256 hash hashes revision rev ref checksum digest fingerprint"
    " etag head parent snapshot id ids oid version"
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NOT_WORD = re.compile(r"[^a-z0-9]+")
_SPECIAL_TOKEN = re.compile(r"<[^\s<>]{1,40}>|\[[A-Z_]{2,20}\]")  # `<|endoftext|>`, `[PAD]`
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_HEX_KEY = re.compile(r"[0-9a-f]{40}")

_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s:/?#@]*):[^\s/?#]+@")
_WEBHOOK = re.compile(
    r"(?P<head>https?://(?:[^\s/?#]*hook[^\s/?#]*/"
    r"|[^\s/?#]+(?:/[^\s/?#]+)*?/(?:webhooks?|hooks?|webhookb2)/))(?P<rest>[^\s\"'<>]+)",
    re.IGNORECASE,
)
# An `Authorization:` header's credentials, and a bearer token of 8 characters
# or more anywhere ("Bearer of good news" stays).
_BEARER = re.compile(
    r"\b(?P<head>authorization:\s*(?:(?:bearer|basic|token|digest)\s+)?"
    r"|bearer\s+(?=[^\s\"',;]{8,}))[^\s\"',;]+",
    re.IGNORECASE,
)
# `Basic <base64>` as a whole value; base64 of `user:pass` has a capital, a digit or
# padding, "basic settings" has none.
_BASIC = re.compile(
    r"\s*(?P<scheme>basic)\s+(?-i:(?=\S*[A-Z0-9+/=])[A-Za-z0-9+/]{6,}={0,2})\s*", re.IGNORECASE
)
_QUOTED = r"\"[^\"]*\"|'[^']*'"
_ASSIGNMENT = re.compile(  # `HF_TOKEN=…`, `?sig=…`, `--api-key=…` inside a text
    rf"(?<![^\s?&;,'\"(\[{{])(?P<name>-{{0,2}}[A-Za-z_][\w.-]*)=(?P<value>{_QUOTED}|[^\s&;,'\"]*)"
)
_OPTION = re.compile(  # `--hub_token VALUE` inside a text
    rf"(?<!\S)(?P<name>-{{1,2}}[A-Za-z][\w.-]*)(?P<gap>\s+)(?P<value>{_QUOTED}|(?!-)[^\s'\"]+)"
)
_OPTION_NAME = re.compile(r"-{1,2}[A-Za-z][\w.-]*|[A-Za-z_][\w.-]*")
_TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])(?:hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|github_pat_\w{30,}|glpat-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])|AIza[0-9A-Za-z_-]{35}"
    r"|eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})"
)


def key_words(key: str) -> Words:
    """`key`'s words, lowercased: `hubToken`, `HF_TOKEN` and `--hub-token` alike."""
    return tuple(word for word in _NOT_WORD.split(_CAMEL.sub("_", key).lower()) if word)


def _secret_words(words: Words) -> bool:
    if not words:
        return False
    if _SECRET_PART.search("_".join(words)):
        return True
    last, before = words[-1], words[-2] if len(words) > 1 else ""
    if last in _SECRET_LAST or (last == "key" and before not in _DATA_WORDS):
        return True
    # The last word only: `max_token_len` and `token_level_rewards` are not secrets.
    if last.endswith("token") and not (last == "token" and before in _SPECIAL_WORDS):
        return True
    if last == "tokens" and (len(words) == 1 or before in _TOKEN_OWNERS):
        return True
    return any(
        word in _SECRET_WORD or (word in ("key", "keys") and i and words[i - 1] in _KEY_PAIRS)
        for i, word in enumerate(words)
    )


def is_secret_key(key: str) -> bool:
    """Whether the value of `key` (a config key, an option, a query parameter) is hidden."""
    return _secret_words(key_words(key))


def _numeric_secret(words: Words) -> bool:
    last = words[-1] if words else ""
    return last in _NUMERIC_LAST or last.endswith(("password", "passwd", "passphrase", "passcode"))


def _commit(words: Words) -> bool:
    return any(word in _COMMIT_WORDS for word in words)


def _secret_text(value: str, words: Words, *, typed: bool = True) -> str:
    """A text named by a secret key: masked, unless empty or a special token
    (`pad_token: "<pad>"` is caught by the key's words alone). On a command
    line (not `typed`) every value is text, so a number-shaped one is treated
    as a number (`--secret_seed 42` stays)."""
    if not value or value == MASK or _SPECIAL_TOKEN.fullmatch(value):
        return mask_text(value)
    if not typed and _NUMBER.fullmatch(value) and not _numeric_secret(words):
        return value
    return MASK


def _named_value(value: str, words: Words) -> str:
    """The value of `name=value` or `--name value` inside a text (quotes kept)."""
    quote = value[0] if value[:1] in ("'", '"') and len(value) > 1 else ""
    inner = value[1:-1] if quote else value
    if _secret_words(words):
        masked = _secret_text(inner, words, typed=False)
    elif _HEX_KEY.fullmatch(inner) and not _commit(words):
        masked = MASK
    else:
        return value
    return f"{quote}{masked}{quote}"


def _mask_named(match: re.Match[str]) -> str:
    name, value = match["name"], match["value"]
    gap = match.groupdict().get("gap") or "="
    return f"{name}{gap}{_named_value(value, _option_words(name))}"


def mask_text(text: str, words: Words = ()) -> str:
    """`text` with the secrets its shape gives away hidden; `words` (its key's)
    decide whether a whole 40-hex value is a key or a commit."""
    if _HEX_KEY.fullmatch(text) and not _commit(words):
        return MASK
    if (basic := _BASIC.fullmatch(text)) is not None:
        return f"{basic['scheme']} {MASK}"
    text = _URL_PASSWORD.sub(rf"\g<head>:{MASK}@", text)
    text = _WEBHOOK.sub(rf"\g<head>{MASK}", text)
    text = _BEARER.sub(rf"\g<head>{MASK}", text)
    text = _OPTION.sub(_mask_named, text)
    text = _ASSIGNMENT.sub(_mask_named, text)
    return _TOKEN_SHAPES.sub(MASK, text)


def _mask_all(value: Any, words: Words, depth: int, *, inside: bool) -> Any:
    """`value` under a secret key: every text and (`inside` an object, or named
    like a password) every number masked; keys, booleans and nulls kept."""
    if depth >= MAX_DEPTH:
        return MASK
    if isinstance(value, str):
        return MASK if inside and value else _secret_text(value, words)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return MASK if inside or _numeric_secret(words) else value
    if isinstance(value, Mapping):
        return {key: _mask_all(item, words, depth + 1, inside=True) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_mask_all(item, words, depth + 1, inside=inside) for item in value]
    return value


def mask_config(value: Any, words: Words = (), depth: int = 0) -> Any:
    """A JSON value (objects, lists, texts, numbers) with its secrets masked;
    `words` are the key it sits under (list items share their list's key)."""
    if depth >= MAX_DEPTH:
        return MASK
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            named = key_words(str(key))
            if _secret_words(named):
                out[key] = _mask_all(item, named, depth + 1, inside=False)
            else:
                out[key] = mask_config(item, named, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [mask_config(item, words, depth + 1) for item in value]
    if isinstance(value, str):
        return mask_text(value, words)
    return value


def _option_words(name: str) -> Words:
    # `-p` is mysql's and sshpass's password; where it is a port (ssh, psql),
    # hiding the port is the lesser harm.
    return ("password",) if name == "-p" else key_words(name)


def mask_argv(argv: Sequence[str]) -> list[str]:
    """The command line with its secrets hidden: the values of secret-looking
    options (``--hub_token xyz``, ``--api-key=xyz``, Hydra's ``trainer.api_key=xyz``,
    ``-p pw``) and whatever the value rules catch in any argument."""
    out: list[str] = []
    named: Words = ()  # the words of the option just before, whose value this may be
    for arg in argv:
        name, equals, value = arg.partition("=")
        if equals and _OPTION_NAME.fullmatch(name):
            out.append(f"{name}={_named_text(value, _option_words(name))}")
            named = ()
        elif arg.startswith("-") and _OPTION_NAME.fullmatch(arg):
            out.append(arg)
            named = _option_words(arg)
        else:
            out.append(_named_text(arg, named))
            named = ()
    return out


def _named_text(value: str, words: Words) -> str:
    if _secret_words(words):
        return _secret_text(value, words, typed=False)
    return mask_text(value, words)


def mask_command(command: Any) -> Any:
    """A run file's `command`: an argv list, or one text (another tool's)."""
    if isinstance(command, list) and all(isinstance(arg, str) for arg in command):
        return mask_argv(command)
    return mask_config(command, ("command",))


def mask_run(run: Mapping[str, Any]) -> dict[str, Any]:
    """A run file's object with every field's secrets masked (`job_id` as it is)."""
    out: dict[str, Any] = {}
    for key, value in run.items():
        if key == "job_id":
            out[key] = value
        elif key == "command":
            out[key] = mask_command(value)
        else:
            out.update(mask_config({key: value}))
    return out
