"""The part of Triton's ``triton_python_backend_utils`` a model's ``execute`` uses, for the
stand-in stub (``stub.py``; not a test): in Triton these classes come from the backend's C++
module and hold their data in shared memory; here they hold numpy arrays."""

from __future__ import annotations

import numpy as np


class Tensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name = name
        self._array = np.asarray(array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class InferenceRequest:
    def __init__(self, inputs: list[Tensor], request_id: str = "") -> None:
        self._inputs = inputs
        self._request_id = request_id

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id


class InferenceResponse:
    def __init__(self, output_tensors: list[Tensor], error: object = None) -> None:
        self._outputs = output_tensors
        self._error = error

    def output_tensors(self) -> list[Tensor]:
        return self._outputs


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    return next((t for t in request.inputs() if t.name() == name), None)
