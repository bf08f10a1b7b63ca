import { VIRTUAL_DOCS, type FailureItem, type FailureState } from '../src/protocol';

export function failure(state: FailureState, extra: Partial<FailureItem> = {}): FailureItem {
  const id = 'run_2026_11_29_16_34_13_593805-pid_1859';
  return {
    id,
    label: "CppCompileError: 'compile' was not declared in this scope",
    runDir: `/ws/torch_compile_debug/${id}`,
    launcher: `file:///ws/torch_compile_debug/${id}/minifier/minifier_launcher.py`,
    state,
    signature: "CppCompileError: 'compile' was not declared in this scope",
    kind: 'compile_error',
    nodesStart: null,
    nodesNow: null,
    queries: null,
    seconds: null,
    message: null,
    repro: null,
    graphUri: VIRTUAL_DOCS.graph.replace('{id}', id),
    kernelUri: null,
    shrinkUri: VIRTUAL_DOCS.shrink.replace('{id}', id),
    report: null,
    externalPid: null,
    compiler: 'aoti_compile_and_package',
    ...extra,
  };
}
