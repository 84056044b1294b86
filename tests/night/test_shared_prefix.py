"""The trainer runs a batch's shared prompt prefix once (``lora_trainer._forward``, module docstring "Shared prompt
prefix"): the loss, every trainable weight's gradient and the validation scores must be those of running every row
whole, on the demo base with a fresh LoRA whose B matrices are not zero (so every weight's gradient is generic)."""

from __future__ import annotations

import pytest

from ratchet_assets.night import lora_trainer as T


def _rows(tokenizer, messages_and_answers):
    from ratchet_core.chat_encoding import encode, encode_answer
    from ratchet_core.chat_format import training_pair

    out = []
    for messages, answer in messages_and_answers:
        prompt, target = training_pair(tokenizer, {"messages": [*messages, answer]})
        p, t = encode(tokenizer, prompt), encode_answer(tokenizer, target)
        out.append((p + t, [-100] * len(p) + t))
    return out


@pytest.fixture(scope="module")
def model_and_rows(tmp_path_factory):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ratchet_core.student_model import ensure_demo_base
    from ratchet_core.workloads import get_workload

    torch.set_num_threads(1)
    base = ensure_demo_base(tmp_path_factory.mktemp("base") / "demo-base")
    tokenizer = AutoTokenizer.from_pretrained(base)
    torch.manual_seed(0)
    lora = LoraConfig(
        r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM",
        modules_to_save=T.resolve_modules_to_save(base, T.LoraTrainConfig()),
    )  # fmt: skip
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), lora)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.02)
    examples = get_workload("tickets").generate(12, seed=3)
    rows = _rows(tokenizer, [(e.messages, e.expected) for e in examples])
    return model, rows, tokenizer.pad_token_id


def _plain(model, batch, pad):
    return T._forward(model, batch, pad, share=False, with_labels=True)[0].loss


def _gradients(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def test_the_shared_prefix_gives_the_plain_batchs_loss_and_gradients(model_and_rows):
    model, rows, pad = model_and_rows
    model.train()
    skip = T.shared_prefix(rows)
    # the system turn is shared; the prefix stops before any row's answer
    assert skip >= T.SHARED_PREFIX_MIN
    assert all(lab[skip] == -100 for _, lab in rows)
    out, began = T._forward(model, rows, pad, share=True, with_labels=True)
    assert began == skip
    plain = _plain(model, rows, pad)
    assert float(out.loss.detach()) == pytest.approx(float(plain), rel=1e-5)
    shared_grads, plain_grads = _gradients(model, out.loss), _gradients(model, _plain(model, rows, pad))
    assert shared_grads.keys() == plain_grads.keys() and len(shared_grads) > 10
    for name, g in plain_grads.items():
        scale = float(g.abs().max()) or 1.0
        assert float((shared_grads[name] - g).abs().max()) <= 1e-4 * scale, name


def test_validation_scores_are_the_plain_batchs(model_and_rows, monkeypatch):
    model, rows, pad = model_and_rows
    shared = T._validate(model, rows, pad, batch_size=5)
    monkeypatch.setattr(T, "SHARED_PREFIX_MIN", 10**9)  # never share: every row whole
    plain = T._validate(model, rows, pad, batch_size=5)
    assert shared[0] == plain[0] and shared[1] == pytest.approx(plain[1], rel=1e-5)


def test_the_prefix_leaves_each_rows_answer_to_its_own_pass():
    prompt = list(range(40))
    rows = [(prompt + [7, 8], [-100] * 40 + [7, 8]), (prompt + [9], [-100] * 40 + [9])]
    assert T.shared_prefix(rows) == 39  # the token before the first answer token stays in the row's part
    assert T.shared_prefix(rows[:1]) == 0
    differ = [([1, 2, 3, 4], [-100, -100, 3, 4]), ([1, 5, 3, 4], [-100, -100, 3, 4])]
    assert T.shared_prefix(differ) == 1
