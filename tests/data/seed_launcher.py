
# from torch.nn import *
# class Repro(torch.nn.Module):
#     def __init__(self) -> None:
#         super().__init__()
#         self.fc = Module()



#     def forward(self, x):
#         x, = fx_pytree.tree_flatten_spec(([x], {}), self._in_spec)
#         fc_weight = self.fc.weight
#         fc_bias = self.fc.bias
#         linear = torch.ops.aten.linear.default(x, fc_weight, fc_bias);  x = fc_weight = fc_bias = None
#         relu = torch.ops.aten.relu.default(linear);  linear = None
#         sigmoid = torch.ops.aten.sigmoid.default(relu);  relu = None
#         return pytree.tree_unflatten((sigmoid,), self._out_spec)


import os
os.environ['TORCHINDUCTOR_CACHE_DIR'] = '/tmp/torchinductor_root'
os.environ.pop('TORCHDYNAMO_REPRO_AFTER', None)
os.environ.pop('TORCHDYNAMO_REPRO_LEVEL', None)

import torch
import torch._inductor.inductor_prims

import torch._dynamo.config
import torch._inductor.config
import torch._functorch.config
import torch.fx.experimental._config
torch._dynamo.config.replay_side_effects = True
torch._dynamo.config.side_effect_replay_policy = 'info'
torch._dynamo.config.specialize_int = False
torch._dynamo.config.specialize_float = False
torch._dynamo.config.assume_static_by_default = True
torch._dynamo.config.automatic_dynamic_shapes = True
torch._dynamo.config.capture_scalar_outputs = False
torch._dynamo.config.capture_dynamic_output_shape_ops = False
torch._dynamo.config.prefer_deferred_runtime_asserts_over_guards = False
torch._dynamo.config.do_not_emit_runtime_asserts = False
torch._dynamo.config.allow_rnn = False
torch._inductor.config.cpp_wrapper = False
torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY = 'compile_error'
torch._inductor.config.triton.cudagraphs = False
torch._inductor.config.triton.autotune_cublasLt = True
torch._inductor.config.triton.autotune_at_compile_time = None
torch._inductor.config.triton.store_cubin = False
torch._inductor.config.aot_inductor.output_path = ''
torch._inductor.config.aot_inductor.serialized_in_spec = ''
torch._inductor.config.aot_inductor.serialized_out_spec = ''
torch._inductor.config.aot_inductor.package = False
torch._inductor.config.graph_partition = True
torch._inductor.config.comprehensive_padding = True
torch._inductor.config.inplace_buffers = True
torch._functorch.config.functionalize_rng_ops = False
torch._functorch.config.fake_tensor_allow_unsafe_data_ptr_access = True
torch._functorch.config.unlift_effect_tokens = False
torch._functorch.config.selective_decompose = False



isolate_fails_code_str = None



# torch version: 2.13.0+cpu
# torch cuda version: None
# torch git version: cf30153c4c131c8164ee7798e5022d810682e2cb


# torch.cuda.is_available()==False, no GPU info collected
exported_program = torch.export.load('/data/torch_compile_debug/run_2026_11_29_16_34_13_593805-pid_1859/minifier/checkpoints/exported_program.pt2')
# print(exported_program.graph)
config_patches={'aot_inductor.package': True}
if __name__ == '__main__':
    from torch._dynamo.repro.aoti import run_repro
    with torch.no_grad():
        run_repro(exported_program, config_patches=config_patches, accuracy=False, command='minify', save_dir='/data/torch_compile_debug/run_2026_11_29_16_34_13_593805-pid_1859/minifier/checkpoints', check_str=None)
