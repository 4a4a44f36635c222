"""The generic core names no kernel library: the report's fields, the dry stand-ins a rule file can declare."""

import typing

from pydantic import BaseModel

from mlacheck.capture.dry import DryStandIns, _actions
from mlacheck.capture.policy import CapturePolicy
from mlacheck.report.model import FindingReport, Report, VariantReport
from mlacheck.rulefiles.schema import DRY_ACTIONS, DryPatch

LIBRARY_WORDS = ("tokenspeed", "flash", "fa4", "cute", "cutlass", "triton", "flashinfer", "fp8", "lse", "mla")


def field_names(model: type[BaseModel]) -> set[str]:
    """Every field name of the model and of the models it holds."""
    names = set()
    for name, field in model.model_fields.items():
        names.add(name)
        for inner in (field.annotation, *typing.get_args(field.annotation)):
            for candidate in (inner, *typing.get_args(inner)):
                if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                    names |= field_names(candidate)
    return names


def test_no_report_field_is_named_after_a_kernel_library():
    names = field_names(Report) | field_names(FindingReport) | field_names(VariantReport)  # (their JSON forms)
    assert {"versions", "families", "findings", "numerics", "scenario"} <= names
    assert [name for name in names if set(name.lower().split("_")) & set(LIBRARY_WORDS)] == []


def test_every_dry_action_a_rule_file_can_name_is_implemented():
    assert set(_actions(CapturePolicy())) | {"stand_in_class"} == set(DRY_ACTIONS)


def test_a_stand_in_class_answers_its_methods_for_the_target():
    patch = DryPatch(
        target="os:getcwd",
        action="stand_in_class",
        methods={"count": "target_sm_count", "clusters": "target_clusters", "l2": "target_l2_bytes"},
    )
    stand_ins = DryStandIns([patch], [], CapturePolicy(target_arch="sm_90a", num_sms=132))
    with stand_ins.around_call():
        import os

        info = os.getcwd("any", "arguments")
        assert (info.count(), info.clusters(2), info.l2()) == (132, 66, 50 << 20)
    assert callable(os.getcwd) and isinstance(os.getcwd(), str)
