"""Writes malformed variants of the golden device fixture (add_with_device) that the loader
must reject with InvalidProgram: bad non_const_buffer_device entries, unknown device types,
negative accelerator indices, and a tensor planned in a buffer of another device.

    venv/bin/python tools/export/make_invalid_device_programs.py
"""

import copy
import os

from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary
from executorch.exir.schema import DeviceType, NonConstBufferDevice

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "tests/fixtures/device/add_with_device/model.pte")
OUT = os.path.join(ROOT, "tests/fixtures/device/invalid")


def variants(plan):
    def dup(p):
        p.non_const_buffer_device = p.non_const_buffer_device * 2

    def idx0(p):
        p.non_const_buffer_device = [NonConstBufferDevice(0, DeviceType.CUDA, 0)]

    def out_of_range(p):
        p.non_const_buffer_device = [NonConstBufferDevice(3, DeviceType.CUDA, 0)]

    def negative_buffer_index(p):
        p.non_const_buffer_device = [NonConstBufferDevice(2, DeviceType.CUDA, -1)]

    def unknown_buffer_type(p):
        p.non_const_buffer_device = [NonConstBufferDevice(2, 7, 0)]

    def negative_tensor_index(p):
        p.values[2].val.extra_tensor_info.device_index = -2

    def unknown_tensor_type(p):
        p.values[2].val.extra_tensor_info.device_type = 9

    def tensor_buffer_mismatch(p):
        # A CUDA tensor placed in the CPU buffer.
        p.values[2].val.allocation_info.memory_id = 1

    return {
        "duplicate_buffer_device": dup,
        "buffer_device_index_zero": idx0,
        "buffer_device_out_of_range": out_of_range,
        "buffer_device_negative_index": negative_buffer_index,
        "buffer_device_unknown_type": unknown_buffer_type,
        "tensor_negative_device_index": negative_tensor_index,
        "tensor_unknown_device_type": unknown_tensor_type,
        "tensor_buffer_device_mismatch": tensor_buffer_mismatch,
    }


def main():
    os.makedirs(OUT, exist_ok=True)
    data = open(SRC, "rb").read()
    base = deserialize_pte_binary(data)
    for name, mutate in variants(None).items():
        pte = copy.deepcopy(base)
        mutate(pte.program.execution_plan[0])
        with open(os.path.join(OUT, f"{name}.pte"), "wb") as f:
            f.write(bytes(serialize_pte_binary(pte)))
        print("wrote", name)


if __name__ == "__main__":
    main()
