
import os
os.environ['TORCHINDUCTOR_CACHE_DIR'] = '/tmp/torchinductor_root'
os.environ.pop('TORCHDYNAMO_REPRO_AFTER', None)
os.environ.pop('TORCHDYNAMO_REPRO_LEVEL', None)

import torch
from torch import tensor, device
import torch.fx as fx
from torch._dynamo.testing import rand_strided
from math import inf
import torch._inductor.inductor_prims



import torch._dynamo.config
import torch._inductor.config
import torch._functorch.config
import torch.fx.experimental._config

torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY = 'compile_error'
torch._inductor.config.inplace_buffers = True
torch._inductor.config.triton.store_cubin = False
torch._inductor.config.comprehensive_padding = True
torch._functorch.config.functionalize_rng_ops = False
torch._functorch.config.fake_tensor_allow_unsafe_data_ptr_access = True
torch._functorch.config.unlift_effect_tokens = True
torch._functorch.config.selective_decompose = False



isolate_fails_code_str = None





if "__compile_source__" in globals():
    import inspect as __after_aot_inspect
    import linecache as __after_aot_linecache
    __after_aot_filename = __after_aot_inspect.currentframe().f_code.co_filename
    __after_aot_linecache.cache[__after_aot_filename] = (
        len(__compile_source__),
        None,
        __compile_source__.splitlines(True),
        __after_aot_filename,
    )
# torch version: 2.13.0+cpu
# torch cuda version: None
# torch git version: cf30153c4c131c8164ee7798e5022d810682e2cb


# torch.cuda.is_available()==False, no GPU info collected
torch._higher_order_ops.triton_kernel_wrap.kernel_side_table.reset_table()

from torch.nn import *
class Repro(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()



    def forward(self, primals_1, primals_2, primals_3):
        permute = torch.ops.aten.permute.default(primals_1, [1, 0]);  primals_1 = None
        addmm = torch.ops.aten.addmm.default(primals_2, primals_3, permute);  primals_2 = permute = None
        relu = torch.ops.aten.relu.default(addmm);  addmm = None
        mul = torch.ops.aten.mul.Tensor(relu, 2)
        add = torch.ops.aten.add.Tensor(mul, 1);  mul = None
        le = torch.ops.aten.le.Scalar(relu, 0);  relu = None
        return (add, primals_3, le)

def load_args(reader):
    buf0 = reader.storage(None, 256)
    reader.tensor(buf0, (8, 8), is_leaf=True)  # primals_1
    buf1 = reader.storage(None, 32)
    reader.tensor(buf1, (8,), is_leaf=True)  # primals_2
    buf2 = reader.storage(None, 128)
    reader.tensor(buf2, (4, 8), is_leaf=True)  # primals_3
load_args._version = 0
mod = Repro()
if __name__ == '__main__':
    from torch._dynamo.repro.after_aot import run_repro
    with torch.no_grad():
        run_repro(mod, load_args, accuracy=False, command='minify', save_dir='/tmp/tc/torch_compile_debug/run_1/minifier/checkpoints', tracing_mode='real', check_str=None)
        # To run it separately, do 
        # mod, args = run_repro(mod, load_args, accuracy=False, command='get_args', save_dir='/tmp/tc/torch_compile_debug/run_1/minifier/checkpoints', tracing_mode='real', check_str=None)
        # mod(*args)