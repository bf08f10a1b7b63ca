from minifier.contract.signature import KernelRef, Signature, analyze_error, kernel_ops, normalize, script_signature
from minifier.exchange.provenance import call_above, resolve_kernel
from minifier.exchange.worker_protocol import GraphInfo

CPP = """CppCompileError: C++ compile error

Command:
g++ /tmp/torchinductor_root/cd/ckt.kernel.cpp -O3 -c -o /tmp/x.o

Output:
/tmp/torchinductor_root/cd/ckt.kernel.cpp: In function ‘void cpp_fused_relu_sigmoid_0(float*)’:
/tmp/torchinductor_root/cd/ckt.kernel.cpp:15:33: error: ‘compile’ was not declared in this scope
   15 |                     auto tmp1 = compile error!;
"""

TRITON = """RuntimeError: Failed to run autotuning code block: Failed to import /tmp/torchinductor_root/ab/cab3kq2xyz7.py
SyntaxError: invalid syntax (cab3kq2xyz7.py, line 29)"""


def test_cpp_compile_error_points_at_kernel_line():
    found = analyze_error("InductorError", CPP)
    assert found.signature == Signature("CppCompileError", "'compile' was not declared in this scope", "compile_error")
    assert found.kernel.file == "/tmp/torchinductor_root/cd/ckt.kernel.cpp"
    assert (found.kernel.line, found.kernel.column) == (15, 33)
    assert found.kernel.name == "cpp_fused_relu_sigmoid_0"
    assert found.kernel.aten_ops == ["relu", "sigmoid"]


def test_an_error_in_aotis_wrapper_code_names_no_kernel(tmp_path):
    """g++ places it in run_impl, a member function, after a kernel's warning; the wrapper declares the kernels it
    calls (`extern "C" void k(...);`) but defines none: no kernel encloses the line."""
    wrapper = tmp_path / "c.wrapper.cpp"
    lines = [
        'extern "C"  void  cpp_fused_gelu_0(float* in_out_ptr0);',
        "void run_impl() {",
        "    // [Provenance debug handles] aoti_torch_cpu_addmm_out:3",
        "    pass",
        "}",
    ]
    wrapper.write_text("\n".join(lines) + "\n")
    text = f"""CppCompileError: C++ compile error

Output:
/tmp/k.cpp: In function ‘void cpp_fused_gelu_0(float*)’:
/tmp/k.cpp:3:5: warning: unused variable ‘x’
{wrapper}: In member function ‘void torch::aot_inductor::AOTInductorModel::run_impl(AtenTensorOpaque**)’:
{wrapper}:4:5: error: ‘pass’ was not declared in this scope
"""
    found = analyze_error("InductorError", text)
    assert found.kernel.name is None and found.kernel.line == 4
    # the guess the search races: the call the wrapper makes just above that line
    provenance = {"cpp_fused_gelu_0:2": ["linear", "gelu"], "aoti_torch_cpu_addmm_out:3": ["linear_1"]}
    assert call_above(found.kernel, provenance) == ["linear_1"]
    graph = GraphInfo(nodes=[], outputs=[], code="", torch_version="2.13", device="cpu")
    assert resolve_kernel(found.kernel, graph, wrapper.read_text()).name is None
    kernel_file = 'extern "C"  void  cpp_fused_gelu_0(float* in_out_ptr0)\n{\n    auto x = 1;\n}\n'
    assert resolve_kernel(KernelRef(line=3), graph, kernel_file).name == "cpp_fused_gelu_0"
    assert resolve_kernel(KernelRef(line=4), graph, wrapper.read_text()).name is None


def test_triton_import_failure_keeps_file_and_line_but_masks_them_in_signature():
    found = analyze_error("InductorError", TRITON)
    assert found.signature.exc_type == "SyntaxError"
    assert found.signature.message == "invalid syntax (cab3kq2xyz7.py, line <n>)"
    assert found.kernel.file == "/tmp/torchinductor_root/ab/cab3kq2xyz7.py"
    assert found.kernel.line == 29


def test_same_bug_in_other_kernel_file_has_same_signature():
    other = CPP.replace("ckt.kernel.cpp:15:33", "zzz.kernel.cpp:16:9").replace("/cd/", "/q7/")
    assert analyze_error("InductorError", CPP).signature.matches(analyze_error("InductorError", other).signature)


def test_different_errors_do_not_match():
    a = analyze_error("RuntimeError", "RuntimeError: Unknown exception")
    b = analyze_error("RuntimeError", "RuntimeError: shape '[8, 16]' is invalid for input of size 12")
    assert not a.signature.matches(b.signature)
    assert b.signature.message == "shape '[<n>, <n>]' is invalid for input of size <n>"


def test_inductor_wrapper_is_peeled_and_cuda_errors_recognized():
    found = analyze_error("InductorError", "LoweringException: AssertionError: bad\n  target: aten.relu")
    assert found.signature.exc_type == "AssertionError"
    cuda = analyze_error("AcceleratorError", "CUDA error: device-side assert triggered\nSearch for `cudaErrorAssert`")
    assert cuda.signature == Signature("CUDAError", "CUDA error: device-side assert triggered", "runtime_error")
    accuracy = analyze_error("AccuracyError", "Bad accuracy detected")
    assert accuracy.signature.kind == "accuracy"


def test_normalize_masks_paths_hashes_addresses_numbers():
    text = "at 0x7ffd1234 in /tmp/a/b.py: buffer cgcubinowigfs7cjuvnq4gvolq size 128 ‘x’"
    assert normalize(text) == "at <addr> in <path>: buffer <hash> size <n> 'x'"
    # words joined by a slash are not paths (seen on an H200 for an out-of-bounds Triton load)
    cuda = "CUDA error: operation not supported on global/shared address space"
    assert normalize(cuda) == cuda


def test_a_wild_pointer_is_one_bug_whichever_cuda_error_reports_it():
    def cuda(message: str) -> Signature:
        return analyze_error("AcceleratorError", f"CUDA error: {message}\nSearch for `cudaError...`").signature

    illegal, address_space = (
        cuda("an illegal memory access was encountered"),
        cuda("operation not supported on global/shared address space"),
    )
    assert illegal.matches(address_space) and address_space.matches(illegal)
    assert not illegal.matches(cuda("device-side assert triggered"))
    assert not illegal.matches(cuda("misaligned address"))


def test_kernel_ops_segments_with_vocabulary_and_skips_unknown_words():
    assert kernel_ops("cpp_fused_add_native_layer_norm_relu_4", {"add", "native_layer_norm", "relu"}) == [
        "add",
        "native_layer_norm",
        "relu",
    ]
    assert kernel_ops("triton_poi_fused_relu_sigmoid_0", {"relu", "sigmoid"}) == ["relu", "sigmoid"]
    assert kernel_ops("triton_per_fused__softmax_mystery_3", {"_softmax"}) == ["_softmax"]
    assert kernel_ops("cpp_fused_relu_0") == ["relu"]


def test_names_inductor_generates_are_masked_like_numbers():
    """One real CPU codegen KeyError named 'buf59' in BERT and 'buf58', 'buf27'... in its candidates."""
    whole, part = (analyze_error("InductorError", f"KeyError: '{b}'", "compile").signature for b in ("buf59", "buf1"))
    assert whole.matches(part) and whole.message == "'buf<n>'"
    assert (
        normalize("tmp12 = in_ptr3[x0] in cpp_fused_add_softmax_7 at s77")
        == "tmp<n> = in_ptr<n>[x0] in <kernel> at s<n>"
    )
    assert normalize("triton_poi_fused_relu_0 failed") == "<kernel> failed"
    assert not whole.matches(analyze_error("InductorError", "KeyError: 'weight'").signature)


def test_a_messageless_exception_is_told_by_its_frame_and_phase():
    here = analyze_error("InductorError", "AssertionError: ", "compile", "torch._inductor.ir.realize")
    assert here.signature.exc_type == "AssertionError" and here.signature.kind == "compile_error"
    assert here.signature.message == "(no message) raised in torch._inductor.ir.realize while compiling"
    elsewhere = analyze_error("InductorError", "AssertionError: ", "compile", "torch._inductor.lowering.embedding")
    later = analyze_error("AssertionError", "", "run", "torch._inductor.ir.realize")
    assert not here.signature.matches(elsewhere.signature) and not here.signature.matches(later.signature)
    assert later.signature.kind == "runtime_error"
    assert analyze_error("AssertionError", "AssertionError()", "load", None).signature.message == (
        "(no message) raised while loading"
    )


def test_an_error_raised_while_compiling_is_a_compile_error_whatever_its_type():
    assert analyze_error("InductorError", "KeyError: 'buf4'", "compile").signature.kind == "compile_error"
    assert analyze_error("RuntimeError", "RuntimeError: Unknown exception", "run").signature.kind == "runtime_error"
    assert analyze_error("AccuracyError", "Bad accuracy detected", "run").signature.kind == "accuracy"


def test_a_script_s_signature_is_its_last_exception_with_a_message_else_its_last_bare_one():
    stderr = (
        "Traceback (most recent call last):\n  ...\ntorch._dynamo.debug_utils.AccuracyError: Bad accuracy detected\n"
    )
    assert script_signature(stderr + "RuntimeError\n").exc_type == "AccuracyError"  # a logged name, not a raise
    assert script_signature("Traceback (most recent call last):\n  ...\nAssertionError\n").exc_type == "AssertionError"
    assert script_signature("all good\n") is None


def test_a_script_s_messageless_exception_is_told_as_a_worker_tells_it_whichever_environment_ran_it():
    """`aoti-minify versions` runs repro.py under other releases, each in its own environment: the bare `assert` of
    the C++ wrapper must be the dump's failure there too, not "another error"."""
    worker = analyze_error(
        "InductorError", "AssertionError: ", "compile", "torch._inductor.codegen.cpp_wrapper_cpu.fill_args"
    )

    def stderr(site: str) -> str:
        return (
            "Traceback (most recent call last):\n"
            f'  File "{site}/torch/_inductor/compile_fx.py", line 10, in compile_fx\n    return x()\n'
            f'  File "{site}/torch/_inductor/codegen/cpp_wrapper_cpu.py", line 1302, in fill_args\n'
            "    assert isinstance(arg, (int, float, bool))\nAssertionError\n\n"
            "The above exception was the direct cause of the following exception:\n\n"
            'Traceback (most recent call last):\n  File "/r/repro.py", line 30, in <module>\n    run()\n'
            "torch._inductor.exc.InductorError: AssertionError: \n"
        )

    for site in ("/venv/lib/python3.11/site-packages", "/envs/torch-2.15.0/lib/python3.12/site-packages", "/src"):
        assert script_signature(stderr(site)) == worker.signature, site
    elsewhere = stderr("/src").replace("cpp_wrapper_cpu.py", "lowering.py").replace("fill_args", "embedding")
    assert not script_signature(elsewhere).matches(worker.signature)
