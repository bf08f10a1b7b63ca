from minifier.contract.events import SourceLine
from minifier.contract.signature import ErrorAnalysis, KernelRef, Signature
from minifier.exchange.provenance import (
    UntracedFailure,
    chain_slices,
    failing_kernel,
    failing_launch,
    kernel_slices,
    last_generated,
    pybinding_name,
    resolve_kernel,
    untraced_failure,
    user_frame,
)
from minifier.exchange.worker_protocol import GraphInfo, NodeInfo


def residual_graph() -> GraphInfo:
    """x -> ln0 -> lin0 -> add0(x) -> relu -> ln1 -> lin1 -> add1(relu): two blocks around a relu."""
    spec = [
        ("ln0", "layer_norm", ["x"]),
        ("lin0", "linear", ["ln0"]),
        ("add0", "add", ["x", "lin0"]),
        ("relu", "relu", ["add0"]),
        ("ln1", "layer_norm", ["relu"]),
        ("lin1", "linear", ["ln1"]),
        ("add1", "add", ["relu", "lin1"]),
    ]
    nodes = [NodeInfo("x", "input", "x", "x", [], True)]
    nodes += [
        NodeInfo(n, "compute", f"aten.{op}.default", op, args, True, source=SourceLine("/home/me/model.py", 10 + i, n))
        for i, (n, op, args) in enumerate(spec)
    ]
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
    wrapper = (
        "# Topologically Sorted Source Nodes: [add1], Original ATen: [aten.add]\n"
        "triton_poi_fused_add_1 = async_compile.triton('triton_poi_fused_add_1', '''...''')\n"
    )
    kernel = resolve_kernel(KernelRef(name="triton_poi_fused_add_1"), residual_graph(), None, [wrapper])
    assert kernel.source_nodes == ["add1"]


def test_kernel_name_found_from_the_failing_line():
    source = (
        '#include <x>\nextern "C"  void  cpp_fused_relu_0(float* p)\n{\n  bad;\n}\n'
        'extern "C"  void  cpp_fused_add_1(float* p)\n{\n}\n'
    )
    assert resolve_kernel(KernelRef(line=4), residual_graph(), source).name == "cpp_fused_relu_0"
    triton = "import triton\n\n@triton.jit\ndef triton_poi_fused_relu_0(in_ptr0, xnumel):\n    x = compile error!\n"
    assert resolve_kernel(KernelRef(line=5), residual_graph(), triton).name == "triton_poi_fused_relu_0"


def test_user_frame_skips_library_frames():
    trace = (
        '  File "/home/me/model.py", line 41, in forward\n    return self.head(x)\n'
        '  File "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", line 134, in forward\n'
        "    return F.linear(input, self.weight, self.bias)\n"
    )
    assert user_frame(trace) == ("/home/me/model.py", 41, "return self.head(x)")
    assert user_frame("") is None


def test_exact_source_nodes_from_inductor_provenance_win_over_op_names():
    graph = residual_graph()
    provenance = {
        "cpp_fused_add_native_layer_norm_relu_4:7": ["ln1", "relu", "add0", "p_weight"],
        "aoti_torch_cpu_addmm_out:8": ["lin1"],
    }
    kernel = resolve_kernel(
        KernelRef(name="cpp_fused_add_native_layer_norm_relu_4"), graph, None, provenance=provenance
    )
    assert kernel.exact and kernel.source_nodes == ["add0", "relu", "ln1"]  # graph order, compute nodes only
    slices = kernel_slices(kernel, graph)
    assert slices[0] == {"relu"} and {"add0", "relu", "ln1"} in slices
    assert all(s <= {"add0", "relu", "ln1"} for s in slices)  # no op-name guesses beside exact evidence
    fused = resolve_kernel(
        KernelRef(name="op4", source_nodes=["add0", "relu", "ln1"], exact=True, fused=True), graph, None
    )
    assert kernel_slices(fused, graph) == [{"add0", "relu", "ln1"}]  # a fusion that failed: no node alone


def test_guesses_skip_expensive_ops_when_a_cheaper_guess_exists():
    kernel = resolve_kernel(KernelRef(name="cpp_fused_add_linear_relu_4"), residual_graph(), None)
    slices = kernel_slices(kernel, residual_graph())
    assert slices and not any({"lin0", "lin1"} & s for s in slices)


def test_a_run_that_dies_in_a_kernel_is_placed_by_the_launch_trace():
    provenance = {
        "cpp_fused_relu_1:2": ["relu"],
        "aoti_torch_cpu_mm_out:1": ["lin0"],
        "aoti_torch_cpu_mm_out:3": ["lin1"],
    }
    died = (
        "[ before_launch: aoti_torch_cpu_mm_out ]\n[ after_launch: aoti_torch_cpu_mm_out ]\n"
        "[ before_launch: cpp_fused_relu_1 ]\nterminate called after throwing an instance of 'int'\n"
    )
    assert failing_launch(died, provenance) == "cpp_fused_relu_1:2"
    second_mm = died.replace(
        "[ before_launch: cpp_fused_relu_1 ]",
        "[ before_launch: cpp_fused_relu_1 ]\n"
        "[ after_launch: cpp_fused_relu_1 ]\n[ before_launch: aoti_torch_cpu_mm_out ]",
    )
    assert failing_launch(second_mm, provenance) == "aoti_torch_cpu_mm_out:3"  # its second launch
    kernel = failing_kernel(None, died, provenance)
    assert kernel.name == "cpp_fused_relu_1" and kernel.source_nodes == ["relu"] and kernel.exact
    assert failing_launch(died.replace("[ before_launch: cpp_fused_relu_1 ]", ""), provenance) is None


# Qwen2's complex sub on the H100 (torch 2.11): the proxy executor's sub raised, the run went on, `_fft_c2r` raised
# on the undefined value and the `add` kernel after it failed reading its output (worker log, abridged)
QWEN2_PROVENANCE = {
    "triton_poi_fused__unsafe_view_gelu_11:29": ["gelu_1", "linear_11"],
    "aoti_torch_cuda__fft_r2c:30": ["fft_rfft"],
    "aoti_torch_cuda_mean_dim:31": ["mean_4"],
    "aoti_torch_cuda_sub_Tensor:32": ["sub_1"],
    "aoti_torch_cuda__fft_c2r:33": ["fft_irfft"],
    "aoti_torch_cuda_mm_out:34": ["linear_12"],
    "triton_poi_fused__unsafe_view_add_mul_12:35": ["mul_19", "add_14", "linear_12"],
}
QWEN2_LOG = (
    "[ before_launch: triton_poi_fused__unsafe_view_gelu_11 ]\n"
    "[ after_launch: triton_poi_fused__unsafe_view_gelu_11 ]\n"
    "[ before_launch: at::_ops::_fft_r2c::call ]\n[ after_launch: at::_ops::_fft_r2c::call ]\n"
    "[E1206 08:30:04.956095733 shim_common.cpp:1341] Exception in aoti_torch: Mismatch between ints consumed and "
    "num_ints, got int_id = 0, num_ints = 1\n"
    "[E1206 08:30:04.962010643 shim_common.cpp:1341] Exception in aoti_torch: Expected a proper Tensor but got None "
    "(or an undefined Tensor in C++) for argument #0 'self'\n"
    "[ before_launch: aoti_torch_cuda_mm_out ]\n[ after_launch: aoti_torch_cuda_mm_out ]\n"
    "[ before_launch: triton_poi_fused__unsafe_view_add_mul_12 ]\n"
    "[E1206 08:30:04.971778578 shim_common.cpp:274] Exception in aoti_torch: Cannot access data pointer of Tensor "
    "that doesn't have storage\n"
)


def test_a_launch_that_never_ended_after_an_untraced_op_raised_is_not_placed():
    # that kernel's slices all passed, on four workers (Qwen2 on the H200): its input was missing
    assert failing_launch(QWEN2_LOG, QWEN2_PROVENANCE) is None
    tail = QWEN2_LOG[QWEN2_LOG.index("[ before_launch: triton_poi_fused__unsafe_view_add_mul_12 ]") :]
    assert failing_launch(tail, QWEN2_PROVENANCE) == "triton_poi_fused__unsafe_view_add_mul_12:35"  # it raised itself


def spectral_graph() -> GraphInfo:
    """SpectralDetrend spliced after an MLP's gelu: rfft, mean, sub, irfft, then the add and mul after it."""
    spec = [
        ("linear_11", "linear", ["x"]),
        ("gelu_1", "gelu", ["linear_11"]),
        ("fft_rfft", "fft_rfft", ["gelu_1"]),
        ("mean_4", "mean", ["fft_rfft"]),
        ("sub_1", "sub", ["fft_rfft", "mean_4"]),
        ("fft_irfft", "fft_irfft", ["sub_1"]),
        ("add_14", "add", ["gelu_1", "fft_irfft"]),
        ("linear_12", "linear", ["x"]),
        ("mul_19", "mul", ["add_14", "linear_12"]),
    ]
    nodes = [NodeInfo("x", "input", "x", "x", [], True)]
    nodes += [NodeInfo(n, "compute", f"aten.{op}.default", op, args, True) for n, op, args in spec]
    return GraphInfo(nodes=nodes, outputs=["mul_19"], code="", torch_version="", device="cuda")


def test_the_untraced_calls_before_the_launch_that_failed_after_a_shim_exception_are_suspects():
    failure = untraced_failure(QWEN2_LOG, QWEN2_PROVENANCE)
    # after the last launch that ended before the first exception (_fft_r2c, traced by its op), untraced; the
    # mm launched after the exception is no suspect
    assert failure == UntracedFailure(
        ["aoti_torch_cuda_mean_dim:31", "aoti_torch_cuda_sub_Tensor:32", "aoti_torch_cuda__fft_c2r:33"],
        "triton_poi_fused__unsafe_view_add_mul_12:35",
        "Mismatch between ints consumed and num_ints, got int_id = 0, num_ints = 1",
    )
    assert failure.nodes(QWEN2_PROVENANCE) == ["mean_4", "sub_1", "fft_irfft"]
    assert untraced_failure(QWEN2_LOG.replace("Exception in", "Warning in"), QWEN2_PROVENANCE) is None
    ended = QWEN2_LOG + "[ after_launch: triton_poi_fused__unsafe_view_add_mul_12 ]\n"
    assert untraced_failure(ended, QWEN2_PROVENANCE) is None  # the run did not die in a launch


def test_the_chains_run_from_each_suspect_to_the_first_failing_node_it_reaches():
    failure = untraced_failure(QWEN2_LOG, QWEN2_PROVENANCE)
    assert chain_slices(failure, QWEN2_PROVENANCE, spectral_graph()) == [
        {"mean_4", "sub_1", "fft_irfft", "add_14"},
        {"sub_1", "fft_irfft", "add_14"},  # the repro the search found on the H100 and H200
        {"fft_irfft", "add_14"},  # mul_19 reads add_14: the chain ends at the first of the kernel's nodes
    ]


def test_a_launch_that_fails_while_compiling_is_placed_in_its_kernel():
    # The Llama device-side assert on the H200 (torch 2.11), run with CUDA_LAUNCH_BLOCKING=1: the assert
    # fired while Inductor ran the kernel during the compile; no launch trace, no API call.
    provenance = {
        "triton_poi_fused_1:2": [],
        "triton_poi_fused__unsafe_view_mul_relu_7:12": ["relu", "mul_3"],
        "triton_poi_fused__unsafe_view_mul_relu_7:40": ["relu_1", "mul_9"],
    }
    log = (
        "triton_helpers.py:248: unknown: block: [2,0,0], thread: [95,0,0] Assertion `injected assert fail` failed.\n"
        "E1201 19:39:03.752000 3176 torch/_inductor/runtime/triton_heuristics.py:984] Failed during launch "
        "triton_poi_fused__unsafe_view_mul_relu_7: \n"
    )
    assert failing_launch(log, provenance) == "triton_poi_fused__unsafe_view_mul_relu_7:12"
    kernel = failing_kernel(None, log, provenance)
    assert kernel.source_nodes == ["relu", "mul_3"] and kernel.exact
    assert failing_launch(log.replace("_7:", "_8:"), provenance) is None  # a kernel the compile did not track


def test_a_failed_api_call_is_placed_by_its_wrapper_line(tmp_path):
    wrapper = tmp_path / "c1.wrapper.cpp"
    wrapper.write_text(
        "void run() {\n    // [Provenance debug handles] aoti_torch_cpu_mean_dim:30\n    call(0);\n"
        "    // [Provenance debug handles] aoti_torch_cpu_sub_Tensor:31\n    call(1);\n}\n"
    )
    log = f"Error: aoti_torch_proxy_executor_call_function(...) API call failed at {wrapper}, line 5\n"
    provenance = {"aoti_torch_cpu_mean_dim:30": ["mean"], "aoti_torch_cpu_sub_Tensor:31": ["sub_1"]}
    assert failing_launch(log, provenance) == "aoti_torch_cpu_sub_Tensor:31"
    named = KernelRef(name="cpp_fused_relu_0")
    error = ErrorAnalysis(Signature("RuntimeError", "x", "runtime_error"), "x", named)
    assert failing_kernel(error, log, provenance) is named  # the error's own kernel comes first


def test_an_error_raised_while_generating_code_is_placed_in_the_kernel_it_was_generating():
    # What `aoti-minify run` of nn-mlp-complex_scalar-assertion logged (torch 2.13): the extern sub got its
    # handle, then generating its call raised AssertionError: got <class 'complex'>.
    provenance = {
        "aoti_torch_cpu_addmm_out:1": ["linear"],
        "cpp_fused_gelu_view_view_as_complex_0:2": ["view_as_complex", "reshape", "gelu", "linear"],
        "aoti_torch_cpu_view_as_complex:3": ["view_as_complex"],
        "aoti_torch_cpu_sub_Tensor:4": ["sub"],
    }
    compiling = ErrorAnalysis(Signature("AssertionError", "got <class 'complex'>", "compile_error"), "x", None)
    kernel = failing_kernel(compiling, "", provenance)
    assert (kernel.name, kernel.source_nodes) == ("aoti_torch_cpu_sub_Tensor", ["sub"])
    running = ErrorAnalysis(Signature("RuntimeError", "x", "runtime_error"), "x", None)
    assert failing_kernel(running, "", provenance) is None  # a run's error is placed by its launch trace alone
    assert (
        last_generated({"aoti_torch_cpu_mm_out:10": ["mm"], "cpp_fused_relu_9:9": ["relu"]})
        == "aoti_torch_cpu_mm_out:10"
    )  # by handle number, not by name or string order


def test_a_kernel_whose_code_generation_raised_is_placed_before_the_last_handle():
    # torch 2.13's CPU outer-loop fusion raises KeyError: 'buf59' while generating the masked softmax's
    # kernel, which has no handle yet; the worker records the scheduler node's graph nodes.
    provenance = {
        "cpp_fused_mean_0:1": ["mean"],
        "aoti_torch_cpu_mm_out:2": ["matmul"],
        "op12:codegen-failed": ["full", "index_put_", "add", "softmax"],
    }
    compiling = ErrorAnalysis(Signature("KeyError", "'buf<n>'", "compile_error"), "x", None)
    kernel = failing_kernel(compiling, "", provenance)
    assert (kernel.name, kernel.source_nodes, kernel.exact) == ("op12", ["full", "index_put_", "add", "softmax"], True)
    assert kernel.fused and not failing_kernel(compiling, "", {"cpp_fused_mean_0:1": ["mean"]}).fused
    assert failing_kernel(compiling, "", {**provenance, "op12:codegen-failed": []}).name == "aoti_torch_cpu_mm_out"


def test_a_slice_of_a_node_of_several_outputs_keeps_its_getitems_and_a_cond_its_branches():
    # nn-transformer-cond: the relu lives in a torch.cond branch; {cond} alone has its outputs unread, so
    # Inductor compiles the branch's relu away and the slice passes.
    spec = [
        ("gt", "gt", "aten.gt.Scalar", ["x"]),
        ("cond", "cond", "higher_order.cond", ["gt", "x"]),
        ("true_graph_0.relu", "relu", "aten.relu.default", ["cond"]),
        ("true_graph_0.mul", "mul", "aten.mul.Tensor", ["true_graph_0.relu", "cond"]),
        ("getitem", "getitem", "getitem", ["cond"]),
        ("getitem_1", "getitem", "getitem", ["cond"]),
        ("add", "add", "aten.add.Tensor", ["getitem", "x"]),
    ]
    nodes = [NodeInfo("x", "input", "x", "x", [], True)]
    nodes += [NodeInfo(n, "compute", target, op, args, op != "cond") for n, op, target, args in spec]
    graph = GraphInfo(nodes=nodes, outputs=["add", "getitem_1"], code="", torch_version="", device="cpu")
    kernel = KernelRef(name="cpp_fused_gt_relu_0", source_nodes=["gt", "cond"], exact=True)
    parts = {"cond", "true_graph_0.relu", "true_graph_0.mul", "getitem", "getitem_1"}
    assert kernel_slices(kernel, graph) == [{"gt"}, parts, {"gt"} | parts]
    # knowing the kernel's ops, the cond whose branch holds two of them goes before gt, which holds one
    kernel = KernelRef(
        name="cpp_fused_gt_mul_relu_0", aten_ops=["gt", "mul", "relu"], source_nodes=["gt", "cond"], exact=True
    )
    assert kernel_slices(kernel, graph) == [parts, {"gt"}, {"gt"} | parts]


def test_a_python_wrapper_s_cpp_kernel_is_named_by_the_wrapper_that_holds_its_source():
    # torch.compile's wrapper module binds each C++ kernel's source to its name; the built file adds a binding
    kernel = 'extern "C" void kernel(const float* in_ptr0, float* out_ptr0)\n{\n    out_ptr0[0] = in_ptr0[0];\n}\n'
    wrapper = (
        "cpp_fused_add_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r'''\n"
        'extern "C" void kernel(const float* in_ptr0, float* out_ptr0)\n{\n}\n' + "''')\n\n"
        "cpp_fused_relu_1 = async_compile.cpp_pybinding(['const float*', 'float*'], r'''\n" + kernel + "''')\n"
    )
    built = f"\n{kernel}\n// Python bindings to call kernel():\n#include <Python.h>\n"
    assert pybinding_name(wrapper, built) == "cpp_fused_relu_1"
    assert pybinding_name(wrapper, "int other() {}") is None
