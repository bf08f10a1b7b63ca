from minifier.events import SourceLine
from minifier.worker_protocol import GraphInfo, NodeInfo
from minifier.provenance import kernel_slices, resolve_kernel, user_frame
from minifier.signature import KernelRef


def residual_graph() -> GraphInfo:
    """x -> ln0 -> lin0 -> add0(x) -> relu -> ln1 -> lin1 -> add1(relu): two blocks around a relu."""
    spec = [("ln0", "layer_norm", ["x"]), ("lin0", "linear", ["ln0"]), ("add0", "add", ["x", "lin0"]),
            ("relu", "relu", ["add0"]), ("ln1", "layer_norm", ["relu"]), ("lin1", "linear", ["ln1"]),
            ("add1", "add", ["relu", "lin1"])]
    nodes = [NodeInfo("x", "input", "x", "x", [], True)]
    nodes += [NodeInfo(n, "compute", f"aten.{op}.default", op, args, True,
                       source=SourceLine("/home/me/model.py", 10 + i, n)) for i, (n, op, args) in enumerate(spec)]
    return GraphInfo(nodes=nodes, outputs=["add1"], code="", torch_version="", device="cpu")


def test_cpu_kernel_resolves_to_the_connected_group_around_its_rarest_op():
    kernel = resolve_kernel(KernelRef(name="cpp_fused_add_native_layer_norm_relu_4"), residual_graph(), None)
    assert kernel.aten_ops == ["add", "native_layer_norm", "relu"]
    assert kernel.source_nodes == ["add0", "relu", "ln1"]


def test_slices_try_the_rarest_op_alone_first():
    graph = residual_graph()
    kernel = resolve_kernel(KernelRef(name="cpp_fused_add_native_layer_norm_relu_4"), graph, None)
    slices = kernel_slices(kernel, graph)
    assert slices[0] == {"relu"}
    assert {"add0", "relu", "ln1"} in slices


def test_names_written_above_a_triton_kernel_win():
    wrapper = ("# Topologically Sorted Source Nodes: [add1], Original ATen: [aten.add]\n"
               "triton_poi_fused_add_1 = async_compile.triton('triton_poi_fused_add_1', '''...''')\n")
    kernel = resolve_kernel(KernelRef(name="triton_poi_fused_add_1"), residual_graph(), None, [wrapper])
    assert kernel.source_nodes == ["add1"]


def test_kernel_name_found_from_the_failing_line():
    source = ("#include <x>\nextern \"C\"  void  cpp_fused_relu_0(float* p)\n{\n  bad;\n}\n"
              "extern \"C\"  void  cpp_fused_add_1(float* p)\n{\n}\n")
    assert resolve_kernel(KernelRef(line=4), residual_graph(), source).name == "cpp_fused_relu_0"
    triton = "import triton\n\n@triton.jit\ndef triton_poi_fused_relu_0(in_ptr0, xnumel):\n    x = compile error!\n"
    assert resolve_kernel(KernelRef(line=5), residual_graph(), triton).name == "triton_poi_fused_relu_0"


def test_user_frame_skips_library_frames():
    trace = ('  File "/home/me/model.py", line 41, in forward\n    return self.head(x)\n'
             '  File "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", line 134, in forward\n'
             '    return F.linear(input, self.weight, self.bias)\n')
    assert user_frame(trace) == ("/home/me/model.py", 41, "return self.head(x)")
    assert user_frame("") is None
