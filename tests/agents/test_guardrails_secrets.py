"""SensitiveDataGuardrail on the credentials issue 30 found it missed, and their near misses."""

from __future__ import annotations

import base64
import json

import pytest
from test_guardrails import ALNUM, B64, CTX, UPPER_DIGITS, assistant, rand

from raygents.agents.builtin_guardrails import SensitiveDataGuardrail
from raygents.agents.guardrails import run_output_guardrails
from raygents.errors import OutputGuardrailTripped

LETTERS = ALNUM[:52]

SECRETS: list[tuple[str, str, str]] = [
    # (kind, text around the secret with {}, secret)
    ("URL with credentials", "clone {} now", "https://user:pass@git.example.com/repo.git"),
    ("URL with credentials", "proxy={}", "http://proxyuser:" + rand(12) + "@10.0.0.1:3128"),
    ("URL with credentials", "<{}>", "ftp://ada:" + rand(10) + "@files.example.org/x"),
    ("URL with credentials", "{}", "https://x-access-token:" + rand(20) + "@github.com/o/r"),
    (
        "AWS secret access key",
        '{{"AccessKeyId": "AKIA' + rand(16, UPPER_DIGITS) + '", "SecretAccessKey": "{}"}}',
        rand(40, B64, seed=11),
    ),
    ("AWS secret access key", '"secretAccessKey":"{}"', rand(40, B64, seed=12)),
    ("AWS secret access key", "secret_access_key: {}", rand(40, B64, seed=13)),
    (
        "AWS secret access key",
        "AKIA" + rand(16, UPPER_DIGITS, seed=3) + " {}",
        rand(40, B64, seed=14),
    ),
    ("AWS secret access key", "ASIA" + rand(16, UPPER_DIGITS, seed=4) + ":{}", rand(40, B64)),
    ("Hugging Face token", "HF_TOKEN={}", "hf_" + rand(34, LETTERS)),
    ("Hugging Face token", "token: {}", "hf_" + rand(34, LETTERS, seed=2)),
    ("Hugging Face token", "{}", "api_org_" + rand(34, LETTERS, seed=3)),
    ("GitLab token", "PRIVATE-TOKEN: {}", "glpat-" + rand(20, ALNUM + "_-")),
    ("GitLab token", "{}", "glpat-" + rand(27, ALNUM + "_-", seed=1) + ".01.0z0abc123"),
    ("npm token", "//registry.npmjs.org/:_authToken={}", "npm_" + rand(36)),
    (
        "SendGrid API key",
        "SENDGRID_API_KEY={}",
        "SG." + rand(22, ALNUM + "_-") + "." + rand(43, ALNUM + "_-"),
    ),
    (
        "Azure storage key",
        "DefaultEndpointsProtocol=https;AccountName=acct;{};EndpointSuffix=core.windows.net",
        "AccountKey=" + rand(86, B64) + "==",
    ),
    (
        "Azure storage key",
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;{}",
        "SharedAccessKey=" + rand(43, B64, seed=5) + "=",
    ),
    ("password", "db password={} ok", "hunter2"),
    ("password", "{}", "PASSWORD: S3cure!pass"),
    ("password", '{{"password": "{}"}}', "c0rrect-horse"),
    ("password", "login?user=ada&{}", "password=Tr0ub4dor"),
    ("password", "{}", "passwd = 'x9!kQ2#a'"),
]

NOT_SECRETS = [
    "Open https://user@example.com/profile or https://example.com:8443/path.",
    "Write to ada@example.com or see mailto:ada@example.com.",
    "git clone git@github.com:org/repo.git",
    "See http://example.com/@ada for the profile.",
    "Use the format https://USER:PASSWORD@host: put your own values in.",
    "https://user:<password>@host and https://user:${TOKEN}@host and https://u:***@h",
    "The SecretAccessKey field holds your key; see the AccessKeyId too.",
    '"SecretAccessKey": "<your secret key>"',
    "commit " + rand(40, "0123456789abcdef") + " follows AKIAXXXXXXXXXXXXXXXX",
    "AKIAXXXXXXXXXXXXXXXX " + rand(40, "0123456789abcdef", seed=9),
    "AKIAXXXXXXXXXXXXXXXX " + rand(40, "0123456789ABCDEF", seed=9),
    "hf_hub_download and hf_transfer are Hugging Face helpers.",
    "hf_" + rand(10, LETTERS),
    "glpat-token-here and glpat-xxxxxxxxxxxxxxxxxxxx",
    "npm_config_registry=https://registry.npmjs.org",
    "npm_" + "x" * 36,
    "SG.example.com and SG.1.2 are not keys",
    "AccountKey=<your-account-key>; AccountName=acct",
    "Enter your password: it must have 12 characters.",
    "password=<your password>",
    "password = None",
    "password: ********",
    "password=$DB_PASSWORD or password=${DB_PASSWORD}",
    "password=os.environ['DB_PASSWORD']",
    "password: SecretStr = Field(...)",
    "password=getpass()",
    "min_password_length=8 and password_reset=true",
    "The password field is required; passwords: many.",
    "Password: 8 characters minimum.",
    "cd $(pwd)/build && echo pwd=/home/ada",
    "pass: true, password: required",
]


@pytest.mark.parametrize(
    ("kind", "template", "secret"), SECRETS, ids=[f"{i}-{c[0]}" for i, c in enumerate(SECRETS)]
)
async def test_new_kinds_trip_without_echoing(kind: str, template: str, secret: str) -> None:
    message = assistant(template.format(secret))
    assert kind in SensitiveDataGuardrail.detect(message.text)
    result = await SensitiveDataGuardrail().check(CTX, message)
    assert result is not None and result.tripwire
    assert kind in result.message and secret not in result.message
    with pytest.raises(OutputGuardrailTripped) as caught:
        await run_output_guardrails([SensitiveDataGuardrail()], CTX, message)
    assert secret not in str(caught.value)


@pytest.mark.parametrize("content", NOT_SECRETS, ids=range(len(NOT_SECRETS)))
def test_near_misses_pass(content: str) -> None:
    assert SensitiveDataGuardrail.detect(content) == []


PROSE = [
    "The quick brown fox jumps over the lazy dog. Passwords should be long; use a manager.",
    "Our API is at https://api.example.com/v1?page=2&limit=50 and returns JSON.",
    "To authenticate, set the Authorization header; never commit secrets to git.",
    "SELECT id, password_hash FROM users WHERE email = 'ada@example.com';",
    json.dumps({"user": "ada", "role": "admin", "created": "2024-06-01T12:00:00Z"}),
    base64.b64encode(b"just some harmless bytes of text here").decode(),
    "sha1 " + rand(40, "0123456789abcdef", seed=21) + " sha256 " + rand(64, "0123456789abcdef"),
    "uuid 123e4567-e89b-12d3-a456-426614174000, hf_api, npm_lifecycle_event=test",
]


@pytest.mark.parametrize("content", PROSE, ids=range(len(PROSE)))
def test_ordinary_text_passes(content: str) -> None:
    assert SensitiveDataGuardrail.detect(content) == []
