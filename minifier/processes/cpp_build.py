"""The package's two C++ compiles side by side (worker side).

AOTInductor compiles a CPU package's generated code in two g++ runs, one after the other: the wrapper, then the
kernels. The wrapper is most of it (the AOTI runtime it includes is optimized anew each time), and a kernel that
does not compile is seen only after it. Here the kernels' compile starts beside the wrapper's: a compile takes the
longer of the two where a core is free, and a kernel that does not compile is known seconds before the compile
ends, which is when the whole graph's failing kernel is worth knowing (the slices around it race while the wrapper
still compiles).

Each error is raised where and in the order Inductor raises it: the wrapper's from the wrapper's build, the
kernels' from theirs, which waits for its compile; so the outcome of every compile is Inductor's own.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future

WRAPPER_SOURCE = ".wrapper.cpp"
KERNEL_SOURCE = ".kernel.cpp"


def _sources(signature: inspect.Signature, *args, **kwargs) -> list[str]:
    """The builder's sources as passed (a torch whose CppBuilder takes others: none, and nothing changes)."""
    try:
        sources = signature.bind(*args, **kwargs).arguments.get("sources", [])
    except TypeError:
        return []
    return [sources] if isinstance(sources, str) else list(sources)


@contextlib.contextmanager
def side_by_side(on_kernel_error: Callable[[BaseException], None] | None = None) -> Iterator[None]:
    """Inside, a package's kernel compile starts with its wrapper's; `on_kernel_error` is called (from the
    compile's thread) as soon as the kernels fail to compile, before Inductor raises that error."""
    from torch._inductor.cpp_builder import CppBuilder

    original_init = CppBuilder.__dict__["__init__"]
    original_build = CppBuilder.__dict__["build"]
    signature = inspect.signature(original_init)
    # held, not only their ids: a builder freed while another is made could pass its id on
    kernels: list[CppBuilder] = []  # made for the package being compiled, not started yet
    wrappers: list[CppBuilder] = []
    started: list[tuple[CppBuilder, Future[None]]] = []

    def __init__(self, *args, **kwargs) -> None:
        original_init(self, *args, **kwargs)
        sources = _sources(signature, self, *args, **kwargs)
        if len(sources) == 1 and sources[0].endswith(KERNEL_SOURCE):
            kernels.append(self)
        elif len(sources) == 1 and sources[0].endswith(WRAPPER_SOURCE):
            wrappers.append(self)

    def build(self) -> None:
        for i, (kernel, done) in enumerate(started):
            if kernel is self:
                del started[i]
                return done.result()  # the kernels' error, raised where Inductor raises it
        if kernels and any(w is self for w in wrappers):
            started.extend((k, _in_a_thread(functools.partial(original_build, k), on_kernel_error)) for k in kernels)
            kernels.clear()
        return original_build(self)

    CppBuilder.__init__ = __init__
    CppBuilder.build = build
    try:
        yield
    finally:
        CppBuilder.__init__ = original_init
        CppBuilder.build = original_build
        for _, pending in started:  # the wrapper raised: its kernels' compile is not left running
            pending.exception()


def _in_a_thread(work: Callable[[], None], on_error: Callable[[BaseException], None] | None) -> Future[None]:
    done: Future[None] = Future()

    def run() -> None:
        try:
            work()
        except BaseException as e:  # handed to the thread that waits for it
            if on_error is not None:  # before the waiting thread can raise it: what it tells comes first
                with contextlib.suppress(Exception):
                    on_error(e)
            done.set_exception(e)
        else:
            done.set_result(None)

    threading.Thread(target=run, daemon=True, name="kernel-compile").start()
    return done
