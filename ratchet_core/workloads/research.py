"""`research`: the calls of Scout's agents (ratchet_agents.scout) as three tasks, so nights train on agent traffic.

Scout answers a research question with a planner, researchers and a writer that talk only through the gateway:

- ``research_plan`` (json): the planner splits the question into subjects and names its kind, per a JSON schema;
- ``research_search`` (tool_call): a researcher calls ``search_sources`` for one subject (``tool_choice``
  "required"); Scout runs the search itself over its local corpus and keeps the notes;
- ``research_write`` (json): the writer turns the question and the researchers' notes into the report's title,
  verdict and the subjects it covered, per a JSON schema.

Each is a plain :class:`TaskDescription`, so the demo teacher answers Scout's calls offline exactly as it answers
the other built-in tasks, and ``ratchet traffic --workload research`` replays Scout-shaped traffic.
"""

from __future__ import annotations

from .base import Intent, TaskDescription, Workload

# Subjects a question is about (first slot) and what it is weighed against (second slot): no keyword inside.
SUBJECTS = (
    "solar panels",
    "wind turbines",
    "heat pumps",
    "battery storage",
    "electric buses",
    "green hydrogen",
)
RIVALS = ("coal plants", "gas boilers", "diesel generators", "petrol cars", "grid upgrades", "oil heating")
KINDS = ("comparison", "cost", "risk", "outlook")

PLAN_SCHEMA = {
    "type": "object",
    "properties": {
        "kind": {"type": "string", "enum": list(KINDS)},
        "subjects": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 4},
    },
    "required": ["kind", "subjects"],
    "additionalProperties": False,
}

REPORT_SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "kind": {"type": "string", "enum": list(KINDS)},
        "covered": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["title", "kind", "covered"],
    "additionalProperties": False,
}

# Scout's local corpus: what its `search_sources` tool finds per subject (a real deployment would search the web).
# Scout's team (ratchet_agents.scout) and its page in the gateway (/ratchet/scout) search the same one.
CORPUS: dict[str, str] = {
    "solar panels": "Utility-scale solar is the cheapest new power in most markets; output follows daylight.",
    "wind turbines": "Onshore wind has low running costs; output varies with weather and needs balancing.",
    "heat pumps": "Heat pumps deliver 3-4 units of heat per unit of electricity; upfront cost is the barrier.",
    "battery storage": "Lithium-ion storage costs fell ~90% since 2010; it shifts hours, not seasons.",
    "electric buses": "Electric buses cut fuel and maintenance costs; charging depots need grid connections.",
    "green hydrogen": "Green hydrogen suits steel and fertiliser; as a fuel for cars and homes it is inefficient.",
    "coal plants": "Coal plants are the most carbon-intensive power source; many run at a loss today.",
    "gas boilers": "Gas boilers are cheap to install; running costs follow volatile gas prices.",
    "diesel generators": "Diesel generators are reliable backup but costly and polluting per kWh.",
    "petrol cars": "Petrol cars cost less upfront than EVs; fuel and servicing cost more over their life.",
    "grid upgrades": "Grid upgrades take a decade to build; they unlock more renewables per connection.",
    "oil heating": "Oil heating is being phased out in several countries; fuel deliveries add cost.",
}

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_sources",
        "description": "Search the research corpus for sources about one subject.",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "The subject, e.g. heat pumps."}},
            "required": ["query"],
            "additionalProperties": False,
        },
    },
}


def _json_format(name: str, schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


_PLAN_TEMPLATES = {
    "comparison": (
        "Research question: how do {subject} compare with {rival}?",
        "Research question: {subject} versus {rival}, which is better?",
    ),
    "cost": (
        "Research question: what do {subject} cost next to {rival}?",
        "Research question: are {subject} cheaper to run than {rival} over ten years?",
    ),
    "risk": (
        "Research question: what are the main risks of replacing {rival} with {subject}?",
        "Research question: how safe are {subject} compared to {rival}?",
    ),
    "outlook": (
        "Research question: will {subject} replace {rival} by 2040?",
        "Research question: what is the future of {subject} against {rival}?",
    ),
}
_PLAN_KEYWORDS = {
    "comparison": ("compare", "versus", "better"),
    "cost": ("cost", "cheaper"),
    "risk": ("risks", "safe"),
    "outlook": ("replace by", "future", "2040"),
}

RESEARCH_PLAN = TaskDescription(
    name="research_plan",
    comparator="json",
    description="Scout's planner: research question -> kind and the subjects to research (JSON schema).",
    system_prompt="You are Scout's planner. Split the research question into the subjects to research and "
    "name the kind of question, as JSON.",
    intents=tuple(
        Intent(
            kind,
            _PLAN_TEMPLATES[kind],
            _PLAN_KEYWORDS[kind],
            {"kind": kind, "subjects": ["{subject}", "{rival}"]},
        )
        for kind in KINDS
    ),
    fallback_answer={"kind": "comparison", "subjects": []},
    slots={"subject": SUBJECTS, "rival": RIVALS},
    response_format=_json_format("research_plan", PLAN_SCHEMA),
)

RESEARCH_SEARCH = TaskDescription(
    name="research_search",
    comparator="tool_call",
    description="Scout's researcher: one subject -> a search_sources call.",
    system_prompt="You are one of Scout's researchers. Search the sources for the subject you are given.",
    intents=(
        Intent(
            "search",
            (
                "Find sources about {topic}.",
                "Look up evidence on {topic} for the report.",
                "Search what is known about {topic}.",
            ),
            ("find", "look", "search"),
            {"name": "search_sources", "arguments": {"query": "{topic}"}},
        ),
    ),
    fallback_answer={"name": "search_sources", "arguments": {"query": None}},
    slots={"topic": SUBJECTS + RIVALS},
    tools=(SEARCH_TOOL,),
    tool_choices=(("required", 1.0),),
)

_WRITE_KEYWORDS = {
    "comparison": ("compare", "comparison"),
    "cost": ("cost",),
    "risk": ("risk",),
    "outlook": ("outlook",),
}

RESEARCH_WRITE = TaskDescription(
    name="research_write",
    comparator="json",
    description="Scout's writer: question and notes -> the report's title, kind and subjects covered (JSON).",
    system_prompt="You are Scout's writer. Write the report's title and list the subjects the notes cover, "
    "as JSON.",
    intents=tuple(
        Intent(
            kind,
            (
                f"Write the {kind} report on {{subject}} and {{rival}} from the notes.",
                f"Notes are in. Draft the {kind} report: {{subject}} against {{rival}}.",
            ),
            _WRITE_KEYWORDS[kind],
            {
                "title": f"{kind.title()}: {{subject}} and {{rival}}",
                "kind": kind,
                "covered": ["{subject}", "{rival}"],
            },
        )
        for kind in KINDS
    ),
    fallback_answer={"title": "Research report", "kind": "comparison", "covered": []},
    slots={"subject": SUBJECTS, "rival": RIVALS},
    response_format=_json_format("research_report", REPORT_SCHEMA),
)

RESEARCH_TASKS = (RESEARCH_PLAN, RESEARCH_SEARCH, RESEARCH_WRITE)

# One Scout run is one plan, two searches and one report: the mix weights follow.
RESEARCH = Workload("research", RESEARCH_TASKS, weights=(0.25, 0.5, 0.25))
