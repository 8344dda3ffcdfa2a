"""The kubectl session of "Programming Kubernetes", chapter 8, through apiary's aggregation proxy:
the pizza server is the stack's own (services.cluster.aggregated.PIZZA, one more process of it), registered as the
book registers it (a Service and its Endpoints, both APIServices with the serving certificate's CA
as caBundle), and every command goes to apiary, which forwards the restaurant group to it."""
from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.stack

GROUP = "restaurant.programming-kubernetes.info"
NS = "pizza-apiserver"

TOPPINGS = "".join(f"""---
apiVersion: {GROUP}/v1alpha1
kind: Topping
metadata:
  name: {name}
spec:
  cost: {cost}
""" for name, cost in (("salami", 1.5), ("mozzarella", 0.75), ("tomato", 0.25)))

MARGHERITA = f"""apiVersion: {GROUP}/v1alpha1
kind: Pizza
metadata:
  name: margherita
spec:
  toppings:
  - mozzarella
  - tomato
  - mozzarella
"""


def wait_until(fn, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.5)


@pytest.fixture(scope="module")
def restaurant(kubectl) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """The stack's pizza server; what the session creates is deleted afterwards."""
    try:
        yield
    finally:
        kubectl.run("delete", "pizzas", "--all", "--wait=false", check=False)
        kubectl.run("delete", "toppings", "--all", "--wait=false", check=False)


def test_the_books_session(kubectl, restaurant: None, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    def available() -> bool:
        out = kubectl.run("get", "apiservices", check=False).stdout
        rows = [line.split() for line in out.splitlines() if GROUP in line]
        return len(rows) == 2 and all(r[2] == "True" for r in rows)

    assert wait_until(available), kubectl.run("get", "apiservices", check=False).stdout

    assert "created" in kubectl.run("create", "-f", "-", input=TOPPINGS).stdout
    kubectl.run("create", "-f", "-", input=MARGHERITA)
    out = kubectl.run("get", "pizza", "margherita", "-o", "yaml").stdout
    assert f"apiVersion: {GROUP}/v1beta1" in out
    assert "- name: mozzarella\n    quantity: 2" in out and "- name: tomato\n    quantity: 1" in out
    assert "cost: 1.75" in out
    out = kubectl.run("get", f"pizzas.v1alpha1.{GROUP}", "-o", "yaml").stdout
    assert "- mozzarella\n    - mozzarella\n    - tomato" in out

    kubectl.run("create", "-f", "-", input=f"apiVersion: {GROUP}/v1beta1\nkind: Pizza\nmetadata:\n  name: plain\n")
    out = kubectl.run("get", "pizza", "plain", "-o", "jsonpath={.spec.toppings[*].name}").stdout
    assert out.split() == ["salami", "mozzarella", "tomato"]

    watch = kubectl.popen("get", "pizza", "-w", "--output-watch-events")
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line.decode()) for line in watch.stdout], daemon=True).start()
    try:
        kubectl.run("create", "-f", "-", input=f"apiVersion: {GROUP}/v1beta1\nkind: Pizza\nmetadata:\n"
                    "  name: watched\nspec:\n  toppings:\n  - name: salami\n")
        kubectl.run("patch", "pizza", "watched", "--type=merge",
                    "-p", '{"spec":{"toppings":[{"name":"salami","quantity":2}]}}')
        kubectl.run("delete", "pizza", "watched")
        seen: list[str] = []
        printed: list[str] = []
        while not {"ADDED", "MODIFIED", "DELETED"} <= set(seen):
            try:
                line = lines.get(timeout=60)
            except queue.Empty:
                raise AssertionError(f"kubectl get pizza -w printed {printed}") from None
            printed.append(line)
            words = line.split()
            if len(words) > 1 and words[1] == "watched":
                seen.append(words[0])
    finally:
        watch.kill()
        watch.wait()

    for name in ("salami", "mozzarella", "tomato"):
        kubectl.run("delete", "topping", name)

    def create_refused():  # type: ignore[no-untyped-def]
        p = kubectl.run("create", "-f", "-", input=MARGHERITA.replace("margherita", "margherita-2"), check=False)
        return p if p.returncode != 0 else None

    refused = wait_until(create_refused, 30)  # the server's informer sees the deletions
    assert refused is not None
    assert "unknown topping: mozzarella" in refused.stderr and "Forbidden" in refused.stderr

    out = kubectl.run("explain", "pizza.spec").stdout
    assert "toppings" in out and "KIND:       Pizza" in out
    assert kubectl.run("auth", "can-i", "create", "pizzas").stdout.strip() == "yes"
