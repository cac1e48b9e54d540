"""Guardrails: the types to write your own and the built-in ones (the public path of
:mod:`raygents.agents.guardrails` and :mod:`raygents.agents.builtin_guardrails`)."""

from raygents.agents.builtin_guardrails import (
    PromptInjectionGuardrail,
    SensitiveDataGuardrail,
    SystemPromptLeakGuardrail,
)
from raygents.agents.guardrails import (
    GuardrailResult,
    InputGuardrail,
    OutputGuardrail,
    input_guardrail,
    output_guardrail,
)

__all__ = [
    "GuardrailResult",
    "InputGuardrail",
    "OutputGuardrail",
    "PromptInjectionGuardrail",
    "SensitiveDataGuardrail",
    "SystemPromptLeakGuardrail",
    "input_guardrail",
    "output_guardrail",
]
