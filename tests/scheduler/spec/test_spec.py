import json

import pytest

from scheduler.core.model import Node, NodeState, Resources
from scheduler.spec import (
    JOB_TEMPLATE,
    JobSpec,
    SpecError,
    load_job_spec,
    parse_job_spec,
    unfittable_reason,
)

GANG = """
name: hello-gang
vc: research
priority: high
roles:
  ps: {replicas: 1, resources: {cpu: 1, memory: 1Gi}, command: python3 ps.py, ports: [main, grpc]}
  worker:
    replicas: 2
    resources: {cpu: 500m, memory: 4096M, gpu: 1, gpu_model: A100}
    command: [python3 w.py, echo done]
retry: {max_attempts: 3, fail_on_exit_codes: [2]}
policies: {on_task_failure: restart_job, completion: {role: worker, when: any}}
mounts: [{source: data/mnist, target: /data}]
env: {A: "1"}
"""


def errors_of(text: str) -> list[dict]:
    with pytest.raises(SpecError) as err:
        load_job_spec(text)
    return err.value.errors


def locs(text: str) -> set[str]:
    return {e["loc"] for e in errors_of(text)}


def test_pasture_spec_is_parsed_in_units():
    spec = load_job_spec(GANG)
    assert list(spec.roles) == ["ps", "worker"]
    w = spec.roles["worker"]
    assert (w.resources.cpu, w.resources.memory, w.resources.gpu) == (500, 4096 * 10**6, 1)
    assert w.command == "python3 w.py\necho done"
    assert spec.priority == 75
    assert spec.retry.retryable(1) and not spec.retry.retryable(2)
    assert spec.retry.retryable(None)  # node loss
    core = spec.to_core(submit_time=5.0, user="ann")
    assert core.total_request() == Resources(2000, 2**30 + 2 * 4096 * 10**6, 2)
    assert core.roles[1].gpu_model == "A100"


def test_dump_and_validate_again_is_identity():
    spec = load_job_spec(GANG)
    again = JobSpec.model_validate(json.loads(json.dumps(spec.model_dump(mode="json"))))
    assert again == spec


def test_template_is_a_valid_spec():
    spec = load_job_spec(JOB_TEMPLATE)
    assert spec.task_count() == 3
    assert "#" in JOB_TEMPLATE


def test_json_is_accepted():
    spec = load_job_spec(json.dumps({"name": "j", "roles": {"a": {"command": "true"}}}))
    assert spec.roles["a"].replicas == 1


def test_malformed_yaml_names_the_line():
    (err,) = errors_of("name: x\nroles: {a: [\n")
    assert err["loc"] == ""
    assert "malformed YAML at line" in err["msg"]


def test_unknown_fields_carry_their_path():
    assert locs("name: x\nroles: {a: {command: t, replica: 2}}\nfoo: 1") == {
        "roles.a.replica",
        "foo",
    }
    assert "roles.a.resources.gpus" in locs(
        "name: x\nroles: {a: {command: t, resources: {gpus: 1}}}"
    )


@pytest.mark.parametrize(
    ("resources", "loc", "word"),
    [
        ("{cpu: -1}", "cpu", "negative"),
        ("{memory: -4Gi}", "memory", "negative"),
        ("{gpu: -1}", "gpu", "0..64"),
        ("{cpu: 100000}", "cpu", "at most"),
        ("{memory: 900Pi}", "memory", "at most"),
        ("{gpu: 1000}", "gpu", "0..64"),
        ("{memory: 4Qi}", "memory", "unknown unit"),
        ("{cpu: 2cores}", "cpu", "unknown unit"),
        ("{memory: 100m}", "memory", "milli"),
        ("{cpu: 0}", "cpu", "more than 0"),
    ],
)
def test_bad_resources_are_rejected_with_the_field(resources, loc, word):
    errs = errors_of(f"name: x\nroles: {{a: {{command: t, resources: {resources}}}}}")
    assert [e["loc"] for e in errs] == [f"roles.a.resources.{loc}"]
    assert word in errs[0]["msg"]


@pytest.mark.parametrize(
    ("text", "loc"),
    [
        ("name: Bad_Name\nroles: {a: {command: t}}", "name"),
        ("name: x\nroles: {}", "roles"),
        ("name: x\nroles: {a: {command: t, replicas: 0}}", "roles.a.replicas"),
        ("name: x\nroles: {a: {command: t, replicas: 2, min_available: 3}}", "roles.a"),
        ("name: x\nroles: {a: {command: t}}\npriority: urgent", "priority"),
        (
            "name: x\nroles: {a: {command: t}}\npolicies: {completion: {role: b}}",
            "policies.completion.role",
        ),
        (
            "name: x\nroles: {a: {command: t}}\nmounts: [{source: ../etc, target: /x}]",
            "mounts.0.source",
        ),
        ("name: x\nroles: {a: {}}", "roles.a.command"),
    ],
)
def test_invalid_specs_name_the_field(text, loc):
    assert loc in locs(text)


def test_not_a_mapping():
    (err,) = errors_of("- a\n- b\n")
    assert "mapping" in err["msg"]


def test_ten_megabyte_spec_is_rejected_before_parsing():
    (err,) = errors_of("name: x\n" + "#" * (10 * 2**20))
    assert "at most" in err["msg"]


OPENPAI = """
protocolVersion: 2
name: PyTorch_MNIST
type: job
prerequisites:
  - {type: dockerimage, name: img, uri: openpai/standard:python_3.6-pytorch_1.2.0-gpu}
parameters: {epochs: 3}
taskRoles:
  worker:
    instances: 2
    dockerImage: img
    resourcePerInstance: {cpu: 4, memoryMB: 8192, gpu: 1, ports: {ssh: 1, http: 1}}
    commands: ["python train.py --epochs <% $parameters.epochs %>"]
defaults: {virtualCluster: research}
jobRetryCount: 2
"""


def test_openpai_v2_is_translated():
    spec = load_job_spec(OPENPAI)
    assert spec.name == "pytorch-mnist"
    assert spec.vc == "research"
    w = spec.roles["worker"]
    assert w.replicas == 2
    assert (w.resources.cpu, w.resources.memory, w.resources.gpu) == (4000, 8192 * 2**20, 1)
    assert w.command == "python train.py --epochs 3"
    assert w.image == "openpai/standard:python_3.6-pytorch_1.2.0-gpu"
    assert w.ports == ["ssh", "http"]
    assert spec.retry.max_attempts == 3


def test_openpai_v1_task_number():
    spec = load_job_spec(
        "jobName: old\ntaskRoles: {w: {taskNumber: 3, cpuNumber: 2, "
        "memoryMB: 1024, gpuNumber: 0, command: run.sh}}"
    )
    assert spec.roles["w"].replicas == 3
    assert spec.roles["w"].resources.cpu == 2000


def test_openpai_unknown_field_has_its_source_path():
    errs = errors_of(OPENPAI.replace("instances: 2", "instances: 2\n    colour: red"))
    assert errs[0]["loc"] == "taskRoles.worker.colour"


def test_openpai_unknown_image_reference():
    errs = errors_of(OPENPAI.replace("dockerImage: img", "dockerImage: nope"))
    assert errs[0]["loc"] == "taskRoles.worker.dockerImage"


MARO = """
mode: grass/azure
name: cim_job
allocation: {mode: single-metric-balanced, metric: cpu}
components:
  actor:
    command: python3 /maro/examples/cim/dqn/actor.py
    image: maro_runtime_cpu
    mount: {target: /mnt/maro}
    num: 5
    resources: {cpu: 2, memory: 2048m, gpu: 0}
  learner:
    command: python3 /maro/examples/cim/dqn/learner.py
    image: maro_runtime_cpu
    mount: {target: /mnt/maro}
    num: 1
    resources: {cpu: 2, memory: 2048m, gpu: 0}
"""


def test_maro_job_is_translated():
    spec = load_job_spec(MARO)
    assert spec.name == "cim-job"
    assert spec.roles["actor"].replicas == 5
    assert spec.roles["actor"].resources.memory == 2048 * 2**20
    assert spec.mounts[0].target == "/mnt/maro"


def test_maro_bad_memory_points_at_the_component():
    errs = errors_of(
        MARO.replace("memory: 2048m, gpu: 0}\n  learner", "memory: lots, gpu: 0}\n  learner")
    )
    assert errs[0]["loc"] == "components.actor.resources.memory"


def node(name, cpu, mem_gi, gpu=0, labels=None, model=None, state=NodeState.READY):
    return Node(
        name,
        Resources(cpu * 1000, mem_gi * 2**30, gpu),
        labels=labels or {},
        gpu_model=model,
        state=state,
    )


def test_no_fit_ever_reason():
    spec = parse_job_spec(
        {"name": "big", "roles": {"w": {"command": "t", "resources": {"cpu": 16, "memory": "1Gi"}}}}
    )
    reason = unfittable_reason(spec, [node("n1", 8, 16), node("n2", 4, 64)])
    assert reason is not None
    assert "role w" in reason and "cpu 16" in reason and "n1" in reason
    assert unfittable_reason(spec, [node("n1", 8, 16), node("big", 32, 64)]) is None


def test_no_fit_by_gang_total_and_selector_and_model():
    spec = parse_job_spec(
        {"name": "g", "roles": {"w": {"command": "t", "replicas": 3, "resources": {"cpu": 4}}}}
    )
    reason = unfittable_reason(spec, [node("n1", 4, 8), node("n2", 4, 8)])
    assert reason is not None and "whole cluster" in reason
    sel = parse_job_spec(
        {"name": "s", "roles": {"w": {"command": "t", "node_selector": {"pool": "gpu"}}}}
    )
    assert "labels" in unfittable_reason(sel, [node("n1", 4, 8, labels={"pool": "cpu"})])
    gm = parse_job_spec(
        {
            "name": "m",
            "roles": {"w": {"command": "t", "resources": {"gpu": 1, "gpu_model": "H100"}}},
        }
    )
    assert "H100" in unfittable_reason(gm, [node("n1", 4, 8, 2, model="A100")])
    assert unfittable_reason(gm, [node("n1", 4, 8, 2, model="H100")]) is None


def test_lost_nodes_do_not_count():
    spec = parse_job_spec({"name": "x", "roles": {"w": {"command": "t"}}})
    assert "no nodes" in unfittable_reason(spec, [node("n1", 4, 8, state=NodeState.LOST)])


def test_the_gang_checked_at_submit_is_the_cores_gang():
    doc = {
        "name": "v",
        "roles": {
            "w": {"command": "t", "replicas": 4, "min_available": 2, "resources": {"cpu": 4}}
        },
    }
    two_nodes = [node("n1", 4, 8), node("n2", 4, 8)]
    spec = parse_job_spec(doc)
    assert spec.to_core().gang_request().cpu_m == 8000
    assert unfittable_reason(spec, two_nodes) is None
    doc["roles"]["w"]["min_available"] = 3
    assert "whole cluster" in unfittable_reason(parse_job_spec(doc), two_nodes)


def test_a_cpu_only_role_with_a_gpu_model_needs_a_node_of_that_model():
    """As the core's gpu-model filter does (it does not skip roles with gpu 0)."""
    spec = parse_job_spec(
        {"name": "m", "roles": {"w": {"command": "t", "resources": {"gpu_model": "H100"}}}}
    )
    assert "H100" in unfittable_reason(spec, [node("n1", 4, 8, 2, model="A100")])
    assert unfittable_reason(spec, [node("n1", 4, 8, 0, model="H100")]) is None


def _elastic_doc(**role):
    return {
        "name": "el",
        "roles": {"w": {"replicas": {"min": 1, "max": 8}, "command": "x", **role}},
    }


def test_declared_throughput_becomes_the_jobs_speedup_table():
    """issue 36: an elastic role's measured rates (steps/s at replica counts) size it in the
    core: speedup(n) = rate(n) / rate(1), linear between the counts given."""
    spec = parse_job_spec(_elastic_doc(throughput={1: 10.0, 2: 18.0, 4: 30.0}))
    assert spec.to_core().scaling == pytest.approx((1.0, 1.8, 2.4, 3.0))
    # from JSON (the API) the keys are strings
    spec = parse_job_spec(_elastic_doc(throughput={"1": 4, "3": 9}))
    assert spec.to_core().scaling == pytest.approx((1.0, 1.625, 2.25))
    assert parse_job_spec(_elastic_doc()).to_core().scaling == ()  # linear


@pytest.mark.parametrize(
    ("throughput", "role", "message"),
    [
        ({2: 10.0}, {}, "expected the rate at 1 replica among the keys, got [2]"),
        ({1: 10.0, 9: 50.0}, {}, "expected replica counts 1..8 as keys, got 9"),
        ({1: 0.0}, {}, "expected a finite rate > 0 at 1 replicas, got 0.0"),
        ({1: float("inf")}, {}, "expected a finite rate > 0 at 1 replicas, got inf"),
        ({1: 1.0}, {"replicas": 2}, "only for an elastic role"),
    ],
)
def test_declared_throughput_is_checked_by_field(throughput, role, message):
    with pytest.raises(ValueError, match="throughput: ") as exc:
        parse_job_spec(_elastic_doc(throughput=throughput, **role))
    assert message in str(exc.value)


def test_throughput_on_two_roles_is_refused():
    doc = _elastic_doc(throughput={1: 1.0})
    doc["roles"]["v"] = {"replicas": {"min": 1, "max": 2}, "command": "y", "throughput": {1: 2.0}}
    with pytest.raises(ValueError, match=r"throughput: expected it on one elastic role"):
        parse_job_spec(doc)


def test_a_declared_checkpoint_interval_reaches_the_core():
    """issue 36, eighth round: the starvation rule demotes a promoted attempt only as far as
    its checkpoints have saved it (scheduler/core/starvation.py); undeclared is None."""
    base = "name: x\nroles: {a: {command: t}}\n"
    assert load_job_spec(
        base + "checkpoint_interval_s: 1800\n"
    ).to_core().checkpoint_interval_s == (1800.0)
    assert load_job_spec(base).to_core().checkpoint_interval_s is None


@pytest.mark.parametrize("value", ["0", "-5", ".nan", ".inf", "1e12", "soon"])
def test_a_checkpoint_interval_out_of_range_is_refused_naming_the_field(value):
    assert locs(f"name: x\nroles: {{a: {{command: t}}}}\ncheckpoint_interval_s: {value}\n") == {
        "checkpoint_interval_s"
    }
