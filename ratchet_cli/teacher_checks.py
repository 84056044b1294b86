"""What `ratchet doctor teacher` asks the configured teacher, and how it judges each answer.

Every request goes through the gateway's own teacher client (``ratchet_gateway.upstream.Upstream``: its HTTP/1.1
fast path for OpenAI-compatible providers, litellm for the others), so what passes here is what the gateway sends.
Each request carries a small token limit, and its cost is estimated before it is sent: the prompt counted with the
teacher's tokenizer plus the limit, at litellm's prices (``ratchet_core.pricing``). A request whose estimate would
take the spend past the cap is not sent, nor is any after it; what was spent is what the teacher's usage says
(the estimate when it reports none).

A check is ``ok``, ``warn`` (Ratchet works, with a limit the detail names) or ``fail`` (requests the gateway
forwards would fail, or answers would break their contract). Answers are judged with the gateway's own
answer-contract guard (``ratchet_core.contract.check_answer``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ratchet_core import pricing
from ratchet_core.contract import check_answer
from ratchet_gateway.errors import GatewayError
from ratchet_gateway.schema_prompt import schema_in_system
from ratchet_gateway.upstream import Timeouts, Upstream

OK, WARN, FAIL = "ok", "warn", "fail"
TIMEOUT_S = 60.0
ANSWER_TOKENS = 64  # room for a short answer (a reasoning model spends some of it thinking)
STRUCTURED_TOKENS = 128

CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
COUNT = [{"role": "user", "content": "Count from 1 to 30, separated by spaces."}]


@dataclass
class Check:
    name: str
    result: str  # ok | warn | fail
    detail: str
    cost_usd: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Spend:
    cap_usd: float
    spent_usd: float = 0.0
    requests: int = 0
    stopped: str = ""  # why no more requests were sent ('' while they are)


@dataclass
class Answer:
    """One request's outcome: the completion (or the error the teacher answered with) and what it cost."""

    body: dict
    resp: dict | None = None
    error: GatewayError | None = None
    cost_usd: float = 0.0
    chunks: list[dict] = field(default_factory=list)  # a streamed answer's chunks

    @property
    def message(self) -> dict:
        choices = (self.resp or {}).get("choices") or [{}]
        return choices[0].get("message") or {}

    @property
    def finish(self) -> str:
        choices = (self.resp or {}).get("choices") or [{}]
        return str(choices[0].get("finish_reason") or "")

    @property
    def usage(self) -> dict:
        return (self.resp or {}).get("usage") or {}

    def refused(self) -> str:
        assert self.error is not None
        return f"refused (HTTP {self.error.status}): {self.error.message[:160]}"


class TeacherDoctor:
    """Runs the checks against one teacher (``run``); `upstream` is the gateway's client for it."""

    def __init__(self, upstream: Upstream, model: str, cap_usd: float, api_key: str | None = None):
        self.upstream = upstream
        self.model = model  # the litellm name (prices, tokenizer)
        self.api_key = api_key
        self.prices = pricing.model_prices(model)
        self.priced = pricing.known_prices(model) is not None
        self.spend = Spend(cap_usd)
        self.limit_key = "max_tokens"  # max_completion_tokens when the provider refuses max_tokens
        self.max_tokens_refusal: GatewayError | None = None
        self.timeouts = Timeouts(first_byte=TIMEOUT_S, connect=10.0, idle=TIMEOUT_S, total=TIMEOUT_S)

    # sending -----------------------------------------------------------------------------------------------
    def estimate(self, body: dict, limit: int) -> float:
        prompt = pricing.prompt_tokens(
            self.model, body["messages"], body.get("tools"), body.get("response_format")
        )
        return self.prices.cost(prompt, limit)

    async def ask(self, body: dict, limit: int = ANSWER_TOKENS, stream: bool = False) -> Answer | None:
        """`body` with a token limit, sent when the cap allows (else None: not sent, and nothing after it)."""
        if "max_tokens" not in body and "max_completion_tokens" not in body:
            body = {**body, self.limit_key: limit}
        estimate = self.estimate(body, limit)
        if self.spend.stopped or self.spend.spent_usd + estimate > self.spend.cap_usd:
            self.spend.stopped = self.spend.stopped or (
                f"not sent: up to ${estimate:.4f} more would pass the ${self.spend.cap_usd:g} cap "
                f"(${self.spend.spent_usd:.4f} spent); raise --max-usd"
            )
            return None
        answer = Answer(body)
        self.spend.requests += 1
        try:
            if stream:
                async for _, chunk in self.upstream.stream(body, timeouts=self.timeouts):
                    answer.chunks.append(chunk)
                usage = next((c["usage"] for c in answer.chunks if c.get("usage")), None)
                answer.resp = {"choices": [], "usage": usage} if usage else {"choices": []}
            else:
                answer.resp = await self.upstream.complete(body, timeouts=self.timeouts)
        except GatewayError as exc:
            answer.error = exc
        usage = answer.usage
        if answer.error is not None and answer.error.status < 500:
            answer.cost_usd = 0.0  # a refused request is not billed
        elif usage.get("prompt_tokens") is not None:
            answer.cost_usd = self.prices.cost(
                int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
            )
        else:
            answer.cost_usd = estimate  # no usage reported: count what it could have cost
        self.spend.spent_usd += answer.cost_usd
        if (
            answer.error is not None
            and answer.error.status == 400
            and self.limit_key == "max_tokens"
            and "max_tokens" in answer.error.message
            and "max_tokens" in body
        ):  # e.g. OpenAI's reasoning models: the same request with max_completion_tokens
            self.max_tokens_refusal = answer.error
            self.limit_key = "max_completion_tokens"
            retry = {k: v for k, v in body.items() if k != "max_tokens"}
            return await self.ask(retry, limit, stream)
        return answer

    # the checks --------------------------------------------------------------------------------------------
    async def run(self) -> list[Check]:
        checks: list[Check] = []
        listed = self.listed_models()
        plain = await self.ask(
            {"messages": [{"role": "user", "content": "Reply with the single word: ready"}]}
        )
        checks.append(self.judge_model(listed, plain))
        checks.append(self._check("answer", plain, judge_answer))
        if plain is None or plain.error is not None:
            reason = "not sent: the plain answer failed" if plain is not None else self.spend.stopped
            return checks + [Check(name, WARN, reason) for name in LATER_CHECKS]
        for name, body, limit, judge in self.probes():
            if name == "json_schema via json_object" and checks[-1].result == OK:
                continue  # strict json_schema works: the fallback is not needed
            if name == "max_tokens":
                checks.append(self.judge_max_tokens(await self.ask(body, limit)))
                continue
            answer = await self.ask(body, limit, stream=name == "stream")
            checks.append(self._check(name, answer, judge))
        return checks

    def probes(self) -> list[tuple[str, dict, int, Callable[[Answer], tuple[str, str]]]]:
        strict = {
            "messages": [{"role": "user", "content": "Give the largest city of France and its population."}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "city_facts", "strict": True, "schema": CITY_SCHEMA},
            },
        }
        return [
            (
                "logprobs",
                {
                    "messages": [{"role": "user", "content": "Say hello."}],
                    "logprobs": True,
                    "top_logprobs": 2,
                },
                ANSWER_TOKENS,
                judge_logprobs,
            ),
            (
                "json_object",
                {
                    "messages": [
                        {"role": "system", "content": "Answer in JSON."},
                        {"role": "user", "content": 'Give a JSON object whose key "ready" is true.'},
                    ],
                    "response_format": {"type": "json_object"},
                },
                STRUCTURED_TOKENS,
                judge_json_object,
            ),
            ("json_schema (strict)", strict, STRUCTURED_TOKENS, judge_strict_schema),
            (
                "json_schema via json_object",
                schema_in_system(strict) or {},
                STRUCTURED_TOKENS,
                judge_fallback,
            ),
            (
                "tools",
                {
                    "messages": [{"role": "user", "content": "What is the weather in Paris? Use the tool."}],
                    "tools": [WEATHER_TOOL],
                    "tool_choice": "auto",
                },
                STRUCTURED_TOKENS,
                judge_tools,
            ),
            ("max_tokens", {"messages": COUNT, "max_tokens": 5}, 5, judge_answer),
            ("stop", {"messages": COUNT, "stop": [" 7 "]}, ANSWER_TOKENS, judge_stop),
            ("seed", {"messages": COUNT, "seed": 7}, ANSWER_TOKENS, judge_accepted),
            ("temperature", {"messages": COUNT, "temperature": 0}, ANSWER_TOKENS, judge_accepted),
            ("stream", {"messages": COUNT}, ANSWER_TOKENS, judge_stream),
        ]

    def _check(self, name: str, answer: Answer | None, judge: Callable[[Answer], tuple[str, str]]) -> Check:
        if answer is None:
            return Check(name, WARN, self.spend.stopped)
        result, detail = judge(answer)
        return Check(name, result, detail, round(answer.cost_usd, 8))

    def judge_max_tokens(self, answer: Answer | None) -> Check:
        name = "max_tokens"
        if self.max_tokens_refusal is not None:
            return Check(
                name,
                FAIL,
                f"refused (HTTP 400): {self.max_tokens_refusal.message[:120]}; clients that send max_tokens get a "
                "400 (they must send max_completion_tokens)",
            )
        if answer is None:
            return Check(name, WARN, self.spend.stopped)
        if answer.error is not None:
            return Check(name, FAIL, answer.refused(), answer.cost_usd)
        used = int(answer.usage.get("completion_tokens") or 0)
        if answer.finish == "length" or (answer.usage and used <= 5):
            return Check(name, OK, f"honoured: {used} completion tokens for a limit of 5", answer.cost_usd)
        return Check(
            name, WARN, f"accepted, not honoured: {used} completion tokens for a limit of 5", answer.cost_usd
        )

    def listed_models(self) -> tuple[bool | None, str]:
        """(whether the provider lists the model: None when it lists none, a detail) from ``GET {base}/models``."""
        up = self.upstream
        if not up.fast:
            return None, f"{up.provider} is reached through litellm, which lists no models"
        request = urllib.request.Request(
            up.base + "/models", headers={"Authorization": f"Bearer {up.api_key}"} if up.api_key else {}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as resp:
                data = json.loads(resp.read() or b"{}").get("data") or []
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403):
                return False, "the API key was refused (GET /models)"
            return None, f"GET /models answered HTTP {exc.code}"
        except (urllib.error.URLError, OSError, ValueError, AttributeError) as exc:
            return False, f"unreachable: {str(getattr(exc, 'reason', exc))[:120]}"
        ids = [str(m.get("id")) for m in data if isinstance(m, dict)]
        if up.model in ids:
            return True, f"{up.model} is listed by {up.base}"
        shown = ", ".join(ids[:5]) + (" ..." if len(ids) > 5 else "")
        return False, f"{up.model} is not among the {len(ids)} models {up.base} lists ({shown or 'none'})"

    def judge_model(self, listed: tuple[bool | None, str], plain: Answer | None) -> Check:
        found, detail = listed
        if found is False:
            return Check("model", FAIL, detail)
        if found:
            return Check("model", OK, detail)
        if plain is not None and plain.error is None:
            return Check("model", OK, f"{self.upstream.model} answers ({detail})")
        if plain is not None and plain.error is not None and plain.error.status == 404:
            return Check("model", FAIL, f"{self.upstream.model}: {plain.refused()}")
        return Check("model", WARN, f"{detail}; see the answer check")


LATER_CHECKS = (
    "logprobs",
    "json_object",
    "json_schema (strict)",
    "tools",
    "max_tokens",
    "stop",
    "seed",
    "temperature",
    "stream",
)


# judges: (result, detail) of one answer ---------------------------------------------------------------------
def _tokens(answer: Answer) -> str:
    u = answer.usage
    if not u:
        return "no usage reported"
    return f"{u.get('prompt_tokens', 0)}+{u.get('completion_tokens', 0)} tokens"


def judge_answer(answer: Answer) -> tuple[str, str]:
    if answer.error is not None:
        return FAIL, answer.refused()
    content = answer.message.get("content")
    if not answer.usage:
        return WARN, "answered without usage: the gateway would record 0 tokens and bill nothing"
    if not isinstance(content, str) or not content.strip():
        return WARN, f"an empty answer (finish {answer.finish or '?'}, {_tokens(answer)})"
    return OK, f"{content.strip()[:40]!r} (finish {answer.finish}, {_tokens(answer)})"


def judge_accepted(answer: Answer) -> tuple[str, str]:
    if answer.error is not None:
        return FAIL, answer.refused() + "; clients that send it get this error"
    return OK, f"accepted ({_tokens(answer)})"


def judge_logprobs(answer: Answer) -> tuple[str, str]:
    if answer.error is not None:
        return WARN, answer.refused() + "; clients that ask for logprobs get this error"
    choices = (answer.resp or {}).get("choices") or [{}]
    content = (choices[0].get("logprobs") or {}).get("content") or []
    scored = [t for t in content if isinstance(t, dict) and isinstance(t.get("logprob"), int | float)]
    if not scored:
        return WARN, "accepted, but the answer carries no logprobs: clients that ask for them get none"
    alternatives = min(len(t.get("top_logprobs") or []) for t in scored)
    return OK, f"{len(scored)} tokens with logprobs, {alternatives} alternatives each"


def _contract(answer: Answer, body: dict | None = None) -> str:
    violation = check_answer(body or answer.body, answer.message, answer.finish)
    return "" if violation is None else f"{violation.kind}: {violation.detail}"[:160]


def judge_json_object(answer: Answer) -> tuple[str, str]:
    if answer.error is not None:
        return FAIL, answer.refused() + "; clients that ask for JSON mode get this error"
    broken = _contract(answer)
    return (FAIL, f"the answer is not a JSON object ({broken})") if broken else (OK, "a JSON object")


def judge_strict_schema(answer: Answer) -> tuple[str, str]:
    if answer.error is not None:
        return WARN, answer.refused()
    broken = _contract(answer)
    if broken:
        return WARN, f"accepted, but the answer breaks the schema ({broken})"
    return OK, "an answer valid for the schema"


def judge_fallback(answer: Answer) -> tuple[str, str]:
    if answer.error is not None:
        return FAIL, answer.refused()
    # judged against the request as the client wrote it: the strict json_schema
    original = {"response_format": {"type": "json_schema", "json_schema": {"schema": CITY_SCHEMA}}}
    broken = _contract(answer, original)
    if broken:
        return FAIL, f"the answer breaks the schema ({broken}): json_schema requests cannot be served"
    return OK, "valid for the schema: the gateway can send json_schema this way (--apply)"


def judge_tools(answer: Answer) -> tuple[str, str]:
    if answer.error is not None:
        return FAIL, answer.refused() + "; requests with tools get this error"
    calls = answer.message.get("tool_calls") or []
    if not calls:
        return WARN, "answered without calling the declared function"
    broken = _contract(answer)
    if broken:
        return FAIL, f"the tool call breaks the declaration ({broken})"
    fn = calls[0].get("function") or {}
    return OK, f"called {fn.get('name')}({str(fn.get('arguments'))[:40]})"


def judge_stop(answer: Answer) -> tuple[str, str]:
    if answer.error is not None:
        return FAIL, answer.refused() + "; clients that send it get this error"
    content = answer.message.get("content") or ""
    if " 7 " in content:
        return WARN, "accepted, not honoured: the answer runs past the stop sequence"
    return OK, f"honoured ({content.strip()[:30]!r})"


def judge_stream(answer: Answer) -> tuple[str, str]:
    if answer.error is not None:
        return FAIL, answer.refused() + "; streamed requests get this error"
    if not answer.usage:
        return (
            WARN,
            f"{len(answer.chunks)} chunks without usage: streamed requests would be recorded with 0 tokens",
        )
    return OK, f"{len(answer.chunks)} chunks, usage in the stream ({_tokens(answer)})"
