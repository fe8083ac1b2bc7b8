"""Per-tenant LoRA adapters: one ``modelctl serve`` of demo-chat with the two demo adapters.

Three tenants with their own keys: acme (adapter demo-chat-acme), beta (demo-chat-beta)
and plain (none: the base). At most one adapter engine runs (``--max_resident_adapters
1``), so acme and beta in turn evict each other. Requests come from the official
``openai`` client; the reference answers from transformers and peft in this process.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from common.tenants import hash_key, new_key
from tests.support import ManagedProcess, free_port, wait_for, wait_http_ok
from tests.system.llm.conftest import CACHE

ROOT = Path(__file__).resolve().parents[3]
MODEL = "demo-chat"
ADAPTERS = {"acme": "demo-chat-acme", "beta": "demo-chat-beta"}
KEYS = {name: new_key() for name in ("acme", "beta", "plain")}
PROMPT = "Write one sentence about the sea."
TOKENS = 16  # the demo adapters part from the base after about eight tokens


class Served:
    def __init__(self, url: str, proc: ManagedProcess, registry: Path) -> None:
        self.url = url
        self.proc = proc
        self.registry = registry

    def client(self, tenant: str) -> Any:
        import openai

        return openai.OpenAI(base_url=f"{self.url}/openai/v1", api_key=KEYS[tenant],
                             max_retries=0, timeout=120)

    def answer(self, tenant: str, model: str = MODEL) -> str:
        done = self.client(tenant).chat.completions.create(
            model=model, messages=[{"role": "user", "content": PROMPT}], max_tokens=TOKENS,
            temperature=0)
        return done.choices[0].message.content or ""


@pytest.fixture(scope="module")
def served(registry_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    from scripts.demo_models import ensure_demo

    for name in (MODEL, *ADAPTERS.values()):
        ensure_demo(str(registry_dir), name)
    where = tmp_path_factory.mktemp("llm-adapters")
    tenants = where / "tenants.yaml"
    tenants.write_text(yaml.safe_dump({"tenants": {
        "acme": {"keys": [hash_key(KEYS["acme"])], "adapter": ADAPTERS["acme"]},
        "beta": {"keys": [hash_key(KEYS["beta"])], "adapter": ADAPTERS["beta"]},
        "plain": {"keys": [hash_key(KEYS["plain"])]},
    }}))
    port = free_port()
    argv = [sys.executable, "-m", "cli", "serve", f"{MODEL}@stable",
            "--adapter", f"{ADAPTERS['acme']}@stable", "--adapter", f"{ADAPTERS['beta']}@stable",
            "--registry", str(registry_dir), "--cache-dir", str(where / "cache"),
            "--port", str(port), "--grpc-port", str(free_port()), "--",
            "--tenants_file", str(tenants), "--enable_grpc", "false", *CACHE,
            "--max_resident_adapters", "1", "--max_new_tokens_limit", "48"]
    proc = ManagedProcess(f"adapters-{port}", argv, log_dir=where, cwd=ROOT)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http_ok(f"{url}/v2/health/ready", timeout_s=300, proc=proc)
        yield Served(url, proc, registry_dir)
    finally:
        proc.stop()


def reference(registry: Path, adapter: str | None) -> str:
    """The greedy answer of transformers' own generate, the adapter applied by peft."""
    import tempfile

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from registry import Registry

    reg = Registry.open(str(registry))
    with tempfile.TemporaryDirectory() as tmp:
        base_dir = Path(tmp) / "base"
        reg.fetch(MODEL, "stable", base_dir)
        tokenizer = AutoTokenizer.from_pretrained(base_dir)
        model: Any = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        if adapter is not None:
            reg.fetch(adapter, "stable", Path(tmp) / "adapter")
            model = PeftModel.from_pretrained(model, Path(tmp) / "adapter")
        ids = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}],
                                            add_generation_prompt=True, return_tensors="pt",
                                            return_dict=True)
        with torch.no_grad():
            out = model.generate(**ids, max_new_tokens=TOKENS, do_sample=False)
        return str(tokenizer.decode(out[0][ids["input_ids"].shape[1]:],
                                    skip_special_tokens=True))


def metric(text: str, name: str, adapter: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") and f'adapter="{adapter}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} for {adapter}")


def test_each_tenant_gets_its_own_adapter_stably_and_as_peft_computes_it(
        served: Served) -> None:
    # acme, beta, acme again: with one resident adapter each turn evicts the other.
    order = ["plain", "acme", "beta", "acme", "plain", "beta"]
    answers: dict[str, list[str]] = {}
    for tenant in order:
        answers.setdefault(tenant, []).append(served.answer(tenant))
    for tenant, got in answers.items():
        assert len(set(got)) == 1, (tenant, got)  # stable across loads and evictions
        assert got[0].strip(), tenant
    plain, acme, beta = answers["plain"][0], answers["acme"][0], answers["beta"][0]
    assert acme != plain and beta != plain and acme != beta, answers
    # The engine's paged attention and generate's attention give the same greedy tokens
    # here (float32 on the CPU); were they to differ in a last bit, a tie could part the
    # two after some tokens, so the whole answer is compared, no prefix.
    assert plain == reference(served.registry, None)
    assert acme == reference(served.registry, ADAPTERS["acme"])
    assert beta == reference(served.registry, ADAPTERS["beta"])

    scraped = httpx.get(f"{served.url}/metrics", timeout=30).text
    for adapter in ADAPTERS.values():  # acme loaded twice, beta twice: three evictions
        assert metric(scraped, "modelctl_llm_adapter_loads_total", adapter) == 2
    evictions = sum(metric(scraped, "modelctl_llm_adapter_evictions_total", a)
                    for a in ADAPTERS.values())
    assert evictions == 3
    assert 'modelctl_llm_adapters_resident{model="demo-chat"' in scraped
    assert metric(scraped, "modelctl_llm_adapter_resident", ADAPTERS["beta"]) == 1
    assert metric(scraped, "modelctl_llm_adapter_resident", ADAPTERS["acme"]) == 0


def test_a_key_never_reaches_another_tenants_adapter(served: Served) -> None:
    import openai

    plain = served.answer("plain")
    acme = served.answer("acme")
    # The model field cannot name an adapter: the served model only.
    for tenant in KEYS:
        for adapter in ADAPTERS.values():
            with pytest.raises(openai.NotFoundError):
                served.answer(tenant, model=adapter)
    # Nor can a header or a body field: plain stays on the base, acme on its own.
    headers = {"authorization": f"Bearer {KEYS['plain']}", "x-adapter": ADAPTERS["acme"],
               "x-lora-adapter": ADAPTERS["acme"], "x-tenant": "acme"}
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": TOKENS, "temperature": 0}
    reply = httpx.post(f"{served.url}/openai/v1/chat/completions", json=body, timeout=120,
                       headers=headers)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["message"]["content"] == plain
    for field in ({"lora_request": ADAPTERS["acme"]}, {"adapter": ADAPTERS["acme"]}):
        refused = httpx.post(f"{served.url}/openai/v1/chat/completions", timeout=60,
                             json={**body, **field}, headers=headers)
        assert refused.status_code == 400, refused.text  # an unknown field: refused
    sample = httpx.post(f"{served.url}/sample", content=b"E equals ", timeout=120,
                        headers={"x-api-key": KEYS["beta"], "x-adapter": ADAPTERS["acme"]})
    assert sample.status_code == 200
    assert served.answer("acme") == acme


def test_a_tenant_whose_adapter_is_not_served_gets_403(served: Served) -> None:
    import openai

    # The tenants file is re-read when it changes: add a tenant naming an unknown adapter.
    path = Path(next(a for a in served.proc.argv if a.endswith("tenants.yaml")))
    doc = yaml.safe_load(path.read_text())
    stranger = new_key()
    doc["tenants"]["gamma"] = {"keys": [hash_key(stranger)], "adapter": "demo-chat-gamma"}
    path.write_text(yaml.safe_dump(doc))
    client = openai.OpenAI(base_url=f"{served.url}/openai/v1", api_key=stranger,
                           max_retries=0, timeout=60)

    def attempt() -> object:
        try:
            client.chat.completions.create(model=MODEL, max_tokens=2,
                                           messages=[{"role": "user", "content": "hi"}])
        except openai.AuthenticationError:
            return None  # the file is not re-read yet
        except openai.PermissionDeniedError as exc:
            return exc
        return "served"

    refused = wait_for(attempt, timeout_s=30, what="the new tenant")
    assert isinstance(refused, openai.PermissionDeniedError), refused
    assert refused.status_code == 403
    assert "demo-chat-gamma" in refused.message and "not serve" in refused.message
