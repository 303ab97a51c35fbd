#!/usr/bin/env python3
# test_chat_templates.py: Beagle's chat template families against jinja2 rendering the models' own
# templates (test/data/chat_templates.json) as HF apply_chat_template does (trim_blocks, lstrip_blocks),
# through build/test/tool_chat_template; and detection from a GGUF's tokenizer.chat_template (gguf package).
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from checks import check, counts
from gguf_llama import add_llama_tensors_and_close, new_llama_writer

ROOT = os.environ.get("BEAGLE_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.environ.get("BEAGLE_BIN", os.path.join(ROOT, "build", "beagle"))
TOOL = os.path.join(ROOT, "build", "test", "tool_chat_template")


TOKENS = {"chatml": ("<|im_start|>", "<|im_end|>"), "llama2": ("<s>", "</s>"), "llama3": ("<|begin_of_text|>", "<|eot_id|>"),
          "mistral": ("<s>", "</s>"), "gemma": ("<bos>", "<eos>"), "phi3": ("<s>", "<|endoftext|>"), "zephyr": ("<s>", "</s>")}
NO_SYSTEM = {"mistral", "gemma"}
CONVS = [
    [{"role": "user", "content": "Hi there"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi there"},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "What is 2+2?"}],
    [{"role": "user", "content": "  padded \n"}, {"role": "assistant", "content": " yes "}, {"role": "user", "content": "ok"}],
]


def main():
    try:
        import jinja2
    except ImportError:
        print("SKIP: jinja2 not installed (pip install Jinja2)")
        return 77
    templates = json.load(open(os.path.join(ROOT, "test", "data", "chat_templates.json")))
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg):
        raise jinja2.TemplateError(msg)

    lines, wants = [], []
    for name, tmpl in templates.items():
        bos, eos = TOKENS[name]
        for conv in CONVS:
            if name in NO_SYSTEM and conv[0]["role"] == "system":
                conv = conv[1:]
            for gen in (True, False):
                want = env.from_string(tmpl).render(messages=conv, bos_token=bos, eos_token=eos,
                                                    add_generation_prompt=gen, raise_exception=raise_exception)
                lines.append(json.dumps({"template": tmpl, "bos": bos, "eos": eos, "messages": conv,
                                         "add_generation_prompt": gen}))
                wants.append((name, want))
    p = subprocess.run([TOOL], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, f"tool exited {p.returncode}: {p.stderr}")
    got = [json.loads(l) for l in p.stdout.splitlines()]
    check(len(got) == len(wants), f"{len(got)} answers for {len(wants)} cases")
    for (name, want), g in zip(wants, got):
        check(g.get("family") == name, f"{name}: detected as {g}")
        check(g.get("text") == want, f"{name}: beagle {g.get('text')!r}\n   jinja2 {want!r}")
    print(f"{len(wants)} renderings over {len(templates)} families match jinja2")

    # A GGUF with tokenizer.chat_template: detection from the file, and an unknown template's error.
    with tempfile.TemporaryDirectory() as d:
        for tmpl, want in ((templates["llama3"], "<|start_header_id|>user"), ("{{ messages }}", None)):
            path = os.path.join(d, "m.gguf")
            write_gguf(path, tmpl)
            p = subprocess.run([BIN, "tokenize", "-m", path, "--chat", "-p", "hi", "--no-bos"], capture_output=True, text=True)
            if want:
                check(p.returncode == 0 and "<|start_header_id|>" in p.stdout, f"GGUF llama3: {p.stdout[:300]} {p.stderr}")
            else:
                check(p.returncode == 1 and "--chat-template" in p.stderr and "not recognised" in p.stderr,
                      f"GGUF unknown template: rc {p.returncode} {p.stderr}")
                p = subprocess.run([BIN, "tokenize", "-m", path, "--chat", "--chat-template", "zephyr", "-p", "hi"],
                                   capture_output=True, text=True)
                check(p.returncode == 0 and "<|user|>" in p.stdout, f"--chat-template zephyr: {p.stdout[:300]} {p.stderr}")
                p = subprocess.run([BIN, "tokenize", "-m", path, "--chat", "--chat-template", "vicuna", "-p", "hi"],
                                   capture_output=True, text=True)
                check(p.returncode == 1 and "expected one of" in p.stderr, f"bad name: {p.stderr}")
    checks, failures = counts()
    print(f"test_chat_templates: {checks} checks, {failures} failed")
    return 1 if failures else 0


def write_gguf(path, tmpl):
    dim, V, F = 64, 8, 96
    toks = ["<unk>", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|user|>", "h", "i"]
    w = new_llama_writer(path, 128, dim, 1, 4, 4, F)
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([-float(i) for i in range(V)])
    w.add_token_types([2, 3, 3, 3, 3, 3, 1, 1])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_chat_template(tmpl)
    rng = np.random.default_rng(1)

    def tensor(name, *shape):
        w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))

    add_llama_tensors_and_close(w, tensor, tensor, 1, V, dim, 4, 4, dim // 4, F)

if __name__ == "__main__":
    sys.exit(main())
