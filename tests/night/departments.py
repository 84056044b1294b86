"""A five-label task of another shape than ``moods``: ``departments`` (route a request to the product's department).

Not a built-in workload; only the learner measurement (tests/night/measure_learner.py) knows it. In ``moods`` each
label has its own phrasings; here every label shares the same six sentence frames and the label is decided by ONE
word, the product named (four products a department), so the student must learn a 20-word lookup whatever the
sentence around it says. The teacher is always right (the label is the product's department).
"""

from __future__ import annotations

from ratchet_core.workloads.base import Intent, TaskDescription, Workload

PRODUCTS = {
    "kitchen": ("kettle", "toaster", "blender", "skillet"),
    "garden": ("hose", "rake", "shovel", "mower"),
    "electronics": ("laptop", "speaker", "camera", "router"),
    "sports": ("racket", "helmet", "dumbbell", "skateboard"),
    "clothing": ("jacket", "scarf", "sneakers", "hoodie"),
}
FRAMES = (
    "My {p} from order {{order_id}} stopped working.",
    "Where is the {p} I ordered to {{city}}?",
    "Can I return the {p}? It was a present.",
    "The {p} arrived late, order {{order_id}}.",
    "Do you still sell the {p} in {{city}}?",
    "I want a second {p}, same as order {{order_id}}.",
)

DEPARTMENTS = TaskDescription(
    name="departments",
    comparator="label",
    description="Customer request -> the department of the product it names.",
    system_prompt="Route the request to one of: "
    + ", ".join(PRODUCTS)
    + ". Answer with the department only.",
    intents=tuple(
        Intent(dept, tuple(f.format(p=p) for f in FRAMES for p in products), products, dept)
        for dept, products in PRODUCTS.items()
    ),
    fallback_answer="electronics",
    slots={"city": ("Porto", "Dallas", "York", "Kyoto", "Accra", "Boise")},
    prefixes=("", "", "Hi. ", "Hello, "),
    suffixes=("", "", " Thanks.", " Regards!"),
)

DEPARTMENTS_WORKLOAD = Workload("departments", (DEPARTMENTS,))
