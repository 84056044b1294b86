"""`tickets`: classify a short support message into one label.

The label is decided by a keyword in the message (`Intent.keywords`), so a tiny model can learn it; the
system prompt lists the labels. Some messages carry an e-mail address or a phone number (PII for redaction).
Drift: from the drift day on, messages about the new "Ratchet Plus" product appear, labelled `subscription`.
Copy `TICKETS` and edit it to describe your own classifier's traffic.
"""

from __future__ import annotations

from .base import Intent, TaskDescription

LABELS = ("billing", "shipping", "refund", "technical", "account", "subscription")

TICKETS = TaskDescription(
    name="tickets",
    comparator="label",
    description="Support message -> one label (billing, shipping, refund, technical, account, subscription).",
    system_prompt=(
        "Classify the support message as one of: " + ", ".join(LABELS) + ". Reply with the label only."
    ),
    intents=(
        Intent(
            "billing",
            (
                "I was charged twice for order {order_id}.",
                "Please resend the invoice for order {order_id} to {email}.",
                "My bill shows {money} but I expected less.",
                "I was overcharged {money} on my last order.",
                "Why was my card charged {money}? Call me at {phone}.",
            ),
            ("charged", "overcharged", "invoice", "bill"),
            "billing",
        ),
        Intent(
            "shipping",
            (
                "My package for order {order_id} has not arrived yet.",
                "Where is the tracking number for order {order_id}?",
                "The delivery to {city} is three days late.",
                "The courier left my parcel at the wrong door.",
                "Can you change the delivery address? Text me at {phone}.",
            ),
            ("package", "parcel", "tracking", "delivery", "courier"),
            "shipping",
        ),
        Intent(
            "refund",
            (
                "I want a refund for order {order_id}.",
                "Please give me my money back for the {product}.",
                "How do I return the {product}? Email me at {email}.",
                "The {product} broke after a day, I want a refund.",
            ),
            ("refund", "money back", "return"),
            "refund",
        ),
        Intent(
            "technical",
            (
                "The app crashes when I open my cart.",
                "I see error {code} on the checkout page.",
                "The website freezes after I click pay.",
                "Found a bug: the {product} page is blank.",
            ),
            ("crashes", "crash", "error", "freezes", "bug"),
            "technical",
        ),
        Intent(
            "account",
            (
                "I forgot my password, my email is {email}.",
                "I can't log in since yesterday. My phone is {phone}.",
                "Please change the email on my account to {email}.",
                "How do I delete my account? I am {name}.",
                "Someone changed my username without asking me.",
            ),
            ("password", "log in", "login", "account", "username"),
            "account",
        ),
    ),
    drift_intents=(
        Intent(
            "subscription",
            (
                "How do I upgrade to the Ratchet Plus plan?",
                "Cancel my Ratchet Plus subscription, please.",
                "Is Ratchet Plus paid monthly or yearly?",
                "My subscription renewed early. Reach me at {email}.",
            ),
            ("subscription", "ratchet plus", "plan"),
            "subscription",
        ),
    ),
    # A message with no keyword is most often a product problem.
    fallback_answer="technical",
    slots={
        "product": ("blue kettle", "desk lamp", "running shoes", "coffee grinder", "yoga mat", "wool scarf"),
        "city": ("Lisbon", "Austin", "Leeds", "Osaka", "Lagos", "Denver"),
        "code": ("E401", "E502", "E900", "X13"),
    },
    prefixes=("", "", "Hi. ", "Hello! ", "Hi team. "),
    suffixes=("", "", " Thanks.", " Thank you!", " Please help."),
)
