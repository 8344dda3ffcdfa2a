"""kubectl straight to the pizza server (a kubeconfig naming its port, the admin client certificate:
an x509 identity of system:masters): the kit's discovery, OpenAPI v3 (explain, --validate=strict),
Table output, watch, apply and errors as kubectl reads them. test_pizza_book.py is the same session
through apiary's aggregation."""
from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import Kubectl
from tests.integration.procs import free_port
from tools import pizza_server
from services.cluster.stack import Stack

pytestmark = pytest.mark.stack
GROUP = "restaurant.programming-kubernetes.info"


@pytest.fixture(scope="module")
def pizza_kubectl(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    tmp = tmp_path_factory.mktemp("pizza-kubectl")
    server = pizza_server.start(stack, free_port(), tmp / "pizza.log")
    config = yaml.safe_load(stack.kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = server.url
    path = tmp / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    cache = tmp / "cache"
    cache.mkdir()
    try:
        yield Kubectl(stack, cache, kubeconfig=path)
    finally:
        server.stop()


def test_the_session_straight_to_the_pizza_server(pizza_kubectl: Kubectl, tmp_path: Path) -> None:
    k = pizza_kubectl
    resources = k.run("api-resources").stdout
    assert f"pizzas                  {GROUP}/v1beta1   true         Pizza" in resources
    assert f"toppings                {GROUP}/v1beta1   false        Topping" in resources

    toppings = "".join(f"---\napiVersion: {GROUP}/v1alpha1\nkind: Topping\nmetadata:\n  name: {n}\nspec:\n"
                       f"  cost: {c}\n" for n, c in (("salami", 1.5), ("mozzarella", 0.75), ("tomato", 0.25)))
    k.run("create", "-f", "-", input=toppings)
    k.run("create", "-f", "-", input=f"apiVersion: {GROUP}/v1alpha1\nkind: Pizza\nmetadata:\n  name: margherita\n"
          "spec:\n  toppings:\n  - mozzarella\n  - tomato\n  - mozzarella\n")
    got = yaml.safe_load(k.run("get", "pizza", "margherita", "-o", "yaml").stdout)
    assert got["apiVersion"] == f"{GROUP}/v1beta1"
    assert got["spec"]["toppings"] == [{"name": "mozzarella", "quantity": 2}, {"name": "tomato", "quantity": 1}]
    assert got["status"]["cost"] == 1.75
    alpha = yaml.safe_load(k.run("get", f"pizzas.v1alpha1.{GROUP}", "-o", "yaml").stdout)
    assert alpha["items"][0]["spec"]["toppings"] == ["mozzarella", "mozzarella", "tomato"]
    table = k.run("get", "pizzas").stdout.splitlines()
    assert table[0].split() == ["NAME", "TOPPINGS", "COST", "AGE"]
    assert table[1].split()[:3] == ["margherita", "mozzarella(2),tomato(1)", "1.75"]

    explained = k.run("explain", "pizza.spec.toppings").stdout
    assert "KIND:       Pizza" in explained and "VERSION:    v1beta1" in explained
    assert "quantity\t<integer>" in explained
    assert "<[]string>" in k.run("explain", "pizza.spec.toppings", f"--api-version={GROUP}/v1alpha1").stdout

    # kubectl apply: create, then a three-way merge patch
    applied = f"apiVersion: {GROUP}/v1beta1\nkind: Pizza\nmetadata:\n  name: applied\nspec:\n  toppings:\n"
    k.run("apply", "-f", "-", input=applied + "  - name: tomato\n")
    k.run("apply", "-f", "-", input=applied + "  - name: tomato\n    quantity: 4\n")
    assert k.run("get", "pizza", "applied", "-o", "jsonpath={.status.cost}").stdout == "1"

    watch = k.popen("get", "pizza", "-w", "--output-watch-events")
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line.decode()) for line in watch.stdout], daemon=True).start()
    try:
        k.run("create", "-f", "-", input=f"apiVersion: {GROUP}/v1beta1\nkind: Pizza\nmetadata:\n  name: watched\n")
        k.run("patch", "pizza", "watched", "--type=merge", "-p", '{"spec":{"toppings":[{"name":"salami"}]}}')
        k.run("delete", "pizza", "watched")
        seen: list[str] = []
        while not {"ADDED", "MODIFIED", "DELETED"} <= set(seen):
            words = lines.get(timeout=60).split()
            if len(words) > 1 and words[1] == "watched":
                seen.append(words[0])
    finally:
        watch.kill()
        watch.wait()

    bad = k.run("create", "-f", "-", check=False, input=f"apiVersion: {GROUP}/v1beta1\nkind: Pizza\nmetadata:\n"
                "  name: bad\nspec:\n  toppings:\n  - name: salami\n    quantity: -1\n")
    assert bad.returncode != 0
    assert 'The Pizza "bad" is invalid: spec.toppings[0].quantity: Invalid value: -1: cannot be negative or zero' \
        in bad.stderr
    ham = k.run("create", "-f", "-", check=False, input=f"apiVersion: {GROUP}/v1alpha1\nkind: Pizza\nmetadata:\n"
                "  name: hawaii\nspec:\n  toppings:\n  - ham\n")
    assert ham.returncode != 0
    assert f'pizzas.{GROUP} "hawaii" is forbidden: unknown topping: ham' in ham.stderr
