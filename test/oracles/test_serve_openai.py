#!/usr/bin/env python3
# test_serve_openai.py: the official `openai` Python client, unmodified, against `beagle serve` on a
# loopback port. stories260K (plain, 2 slots; then tree speculation with its draft): completions
# streamed and not, greedy text and token count equal to `beagle generate` for the same prompt;
# seeded sampling equal to `generate --seed` (plain slots sample as generate does); stop strings;
# 4 concurrent requests of mixed lengths on 2 slots (one target forward per round for both slots,
# the later requests arriving mid-generation from the queue) each equal to its single-request output; /v1/models, /health, /metrics; chat on a model without a chat template is a
# 400; the same with the target as its own independent draft model (-md). SmolLM2 + the shipped draft: two
# short chat requests (one streamed) equal to `generate --chat`.
import concurrent.futures, json, os, tempfile

import openai

from checks import check, finish
from serve_util import Server, generate, STORIES, STORIES_DRAFT, SMOL, SMOL_DRAFT

PROMPTS = [("Once upon a time", 60), ("The little dog", 200), ("Lily and Ben went", 230), ("One day", 8)]


def concurrent_equal_alone(c, wants, label):
    """PROMPTS sent at once (greedy): each response equals the prompt decoded alone."""
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        futs = [ex.submit(c.completions.create, model="x", prompt=p, max_tokens=n, temperature=0) for p, n in PROMPTS]
        got = [f.result() for f in futs]
    for (p, n), w, g in zip(PROMPTS, wants, got):
        check(g.choices[0].text == w[0], f"{label} concurrent {p!r}: {g.choices[0].text!r} vs {w[0]!r}")


def served_equal_alone(args, log, wants, label):
    """A stories260K server with these args (1 thread, 256 context): PROMPTS at once each equal to its
    decoding alone; returns its metrics; the server must exit 0."""
    srv = Server(STORIES + args + ["-t", "1", "-c", "256"], log)
    try:
        concurrent_equal_alone(openai.OpenAI(base_url=srv.base, api_key="unused", max_retries=0), wants, label)
        return srv.metrics()
    finally:
        check(srv.stop() == 0, f"{label} server exits 0")


def completion_checks(srv, label):
    c = openai.OpenAI(base_url=srv.base, api_key="unused", max_retries=0)
    prompt, n = PROMPTS[0]
    want, want_n = generate(STORIES, prompt, n)
    r = c.completions.create(model="x", prompt=prompt, max_tokens=n, temperature=0)
    check(r.choices[0].text == want, f"{label}: completion differs from generate:\n{r.choices[0].text!r}\n{want!r}")
    check(r.usage.completion_tokens == want_n, f"{label}: completion_tokens {r.usage.completion_tokens} vs {want_n}")
    check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, f"{label}: usage total")
    check(r.choices[0].finish_reason in ("length", "stop"), f"{label}: finish_reason {r.choices[0].finish_reason}")
    check(r.object == "text_completion", f"{label}: object {r.object}")
    # streamed: the same text, chunk by chunk; usage in the last chunk when asked
    parts, reasons, usage = [], [], None
    for ch in c.completions.create(model="x", prompt=prompt, max_tokens=n, temperature=0, stream=True,
                                   stream_options={"include_usage": True}):
        if ch.choices:
            parts.append(ch.choices[0].text)
            reasons.append(ch.choices[0].finish_reason)
        if ch.usage:
            usage = ch.usage
    check("".join(parts) == want, f"{label}: streamed completion differs:\n{''.join(parts)!r}\n{want!r}")
    check(reasons[-1] in ("length", "stop") and all(x is None for x in reasons[:-1]), f"{label}: finish reasons {reasons[-3:]}")
    check(usage is not None and usage.completion_tokens == want_n, f"{label}: streamed usage {usage}")
    # stop string: the greedy text up to its first occurrence
    word = want.split()[3]
    r = c.completions.create(model="x", prompt=prompt, max_tokens=n, temperature=0, stop=[word, "zzzz"])
    check(r.choices[0].text == want[:want.index(word)] and r.choices[0].finish_reason == "stop",
          f"{label}: stop {word!r}: {r.choices[0].text!r}, {r.choices[0].finish_reason}")
    return c


with tempfile.TemporaryDirectory() as tmp:
    # ---- stories260K, plain decoding, 2 slots
    srv = Server(STORIES + ["-t", "1", "-c", "256", "--parallel", "2"], f"{tmp}/plain.log")
    try:
        c = completion_checks(srv, "plain")
        # seeded sampling: plain slots draw exactly as `beagle generate` does
        want, _ = generate(STORIES, "Once upon a time", 40, ["--temp", "1", "--top-p", "0.9", "-s", "7"])
        r = c.completions.create(model="x", prompt="Once upon a time", max_tokens=40, temperature=1, top_p=0.9, seed=7)
        check(r.choices[0].text == want, f"seeded sample differs:\n{r.choices[0].text!r}\n{want!r}")
        # concurrent requests, more than slots: each equals its own single-request output
        wants = [generate(STORIES, p, n) for p, n in PROMPTS]
        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            futs = [ex.submit(c.completions.create, model="x", prompt=p, max_tokens=n, temperature=0) for p, n in PROMPTS]
            got = [f.result() for f in futs]
        for (p, n), w, g in zip(PROMPTS, wants, got):
            check(g.choices[0].text == w[0] and g.usage.completion_tokens == w[1], f"concurrent {p!r}: {g.choices[0].text!r} vs {w[0]!r}")
        models = c.models.list()
        check([m.id for m in models.data] == ["stories260K.bin"], f"models: {[m.id for m in models.data]}")
        st, _, body = srv.request("GET", "/health")
        check(st == 200 and json.loads(body)["status"] == "ok", f"health: {st} {body!r}")
        try:
            c.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
            check(False, "chat on a model without ChatML tokens must fail")
        except openai.BadRequestError as e:
            check("--chat-template" in str(e), f"chat error names --chat-template: {e}")
        m = srv.metrics()
        check(m.get('beagle_requests_total{endpoint="/v1/completions",status="200"}', 0) >= 8, f"metrics requests: {m}")
        check(m.get('beagle_requests_total{endpoint="/v1/chat/completions",status="400"}', 0) == 1, "metrics 400")
        check(m.get("beagle_generated_tokens_total", 0) >= 60 * 3 + 40 + 100, "metrics tokens")
        check(m.get("beagle_target_forward_rows_total", 0) > m.get("beagle_target_forwards_total", 1),
              "some plain rounds batched several requests (rows > forwards)")
        check(m.get("beagle_queue_length", -1) == 0 and m.get("beagle_slots_active", -1) == 0, "idle at the end")
    finally:
        check(srv.stop() == 0, "plain server exits 0 on SIGTERM")

    # ---- stories260K, tree speculation with its draft
    if os.path.exists(STORIES_DRAFT):
        srv = Server(STORIES + ["-d", STORIES_DRAFT, "--spec", "tree", "-t", "1", "-c", "256", "--parallel", "2"],
                     f"{tmp}/tree.log")
        try:
            c = completion_checks(srv, "tree")
            wants = [generate(STORIES, p, n) for p, n in PROMPTS]
            concurrent_equal_alone(c, wants, "tree")
            m = srv.metrics()
            check(m.get("beagle_spec_tau", 0) > 1.0, f"tree tau {m.get('beagle_spec_tau')}")
            check(m.get('beagle_spec_acceptance{depth="1"}', -1) > 0, "acceptance at depth 1")
            check(m.get("beagle_target_forwards_total", 0) < m.get("beagle_spec_rounds_total", 0),
                  f"some forwards verified two requests' trees at once ({m.get('beagle_target_forwards_total')} forwards, "
                  f"{m.get('beagle_spec_rounds_total')} rounds)")
        finally:
            check(srv.stop() == 0, "tree server exits 0")
        # the default with a draft: auto (per slot generate's round policy; a batch of slots speculative or
        # plain by the batch's): concurrent greedy responses still equal each prompt decoded alone
        m = served_equal_alone(["-d", STORIES_DRAFT, "--parallel", "3"], f"{tmp}/auto.log", wants, "auto")
        check(m.get("beagle_spec_rounds_total", 0) > 0, f"auto: speculative rounds counted ({m.get('beagle_spec_rounds_total')})")
        check("spec auto" in open(f"{tmp}/auto.log").read(), "auto is the default with a draft (the server's log line)")
        # an independent draft model (-md), here the target drafting itself: every slot's chain is accepted whole
        m = served_equal_alone(["-md", STORIES[1], "--spec", "chain", "--parallel", "2"], f"{tmp}/md.log", wants, "-md chain")
        check(m.get("beagle_spec_tau", 0) > 3.0, f"-md chain: the self draft's tau {m.get('beagle_spec_tau')} > 3")
    else:
        check(False, f"missing {STORIES_DRAFT}")

    # ---- SmolLM2 + the shipped draft: chat
    if os.path.exists(SMOL) and os.path.exists(SMOL_DRAFT):
        srv = Server(["-m", SMOL, "-d", SMOL_DRAFT, "-t", "2", "-c", "512", "--total-tokens", "32"], f"{tmp}/smol.log")
        try:
            c = openai.OpenAI(base_url=srv.base, api_key="unused", max_retries=0)
            q = "What is the capital of France?"
            want, want_n = generate(["-m", SMOL], q, 24, ["--chat"])
            r = c.chat.completions.create(model="smol", messages=[{"role": "user", "content": q}], max_tokens=24, temperature=0)
            check(r.choices[0].message.content == want, f"smol chat: {r.choices[0].message.content!r} vs {want!r}")
            check(r.choices[0].message.role == "assistant" and r.object == "chat.completion", "chat object")
            check(r.usage.completion_tokens == want_n, f"smol usage {r.usage.completion_tokens} vs {want_n}")
            q = "Name three colours."
            want, _ = generate(["-m", SMOL], q, 20, ["--chat", "--system", "Be brief."])
            parts, roles = [], []
            for ch in c.chat.completions.create(model="smol", max_tokens=20, temperature=0, stream=True,
                                                messages=[{"role": "system", "content": "Be brief."},
                                                          {"role": "user", "content": q}]):
                check(ch.object == "chat.completion.chunk", f"chunk object {ch.object}")
                if ch.choices[0].delta.role:
                    roles.append(ch.choices[0].delta.role)
                parts.append(ch.choices[0].delta.content or "")
            check("".join(parts) == want, f"smol streamed chat: {''.join(parts)!r} vs {want!r}")
            check(len(parts) >= 5, f"smol: streamed token by token, not at the end ({len(parts)} chunks)")
            check(roles == ["assistant"], f"role once in the first delta: {roles}")
        finally:
            check(srv.stop() == 0, "smol server exits 0")
    else:
        check(False, f"missing {SMOL} or {SMOL_DRAFT}")

finish("test_serve_openai")
