// The language server <-> client contract (docs/protocol.md), client side.
// GENERATED from server/protocol.py by `python -m server.codegen`: edit that file and regenerate.

/** bumped on any change that a client of the previous version would misread */
export const PROTOCOL_VERSION = 2;

/** the key of `ClientCapability` / `ServerCapability` in the capabilities' `experimental` */
export const CAPABILITY = 'aotiLens';

/** VS Code's settings are `aoti.<key>`; didChangeConfiguration may nest Settings under it */
export const SETTINGS_SECTION = 'aoti';

/** the scheme of the virtual documents (LSP 3.18 workspace/textDocumentContent) */
export const SCHEME = 'aoti';

/** Custom LSP methods. */
export const Methods = {
  /** request (client -> server), params `{}`, result `FailureList` */
  failures: 'aoti/failures',
  /** notification (server -> client), params `FailureList`, on any change; only to clients that announce `ClientCapability` */
  failuresChanged: 'aoti/failuresChanged',
  /** request (client -> server), params `CaptureParams`, result `CaptureCommand`: the command line a client runs in a terminal */
  captureCommand: 'aoti/captureCommand',
} as const;

/** Server commands (advertised in executeCommandProvider; vscode-languageclient registers them). Arguments: `[failureId]`. */
export const ServerCommands = {
  /** minify the failure; on a failure already being minified, show its shrinking graph */
  minify: 'aoti.minify',
  /** run the failure once to learn its signature and failing kernel (writes failure.json) */
  reproduce: 'aoti.reproduce',
  /** stop the failure's job (a minification still writes repro.py from its best checkpoint) */
  cancel: 'aoti.cancel',
  /** open the failure's repro.py (window/showDocument) */
  openRepro: 'aoti.openRepro',
  /** open the shrinking graph document (window/showDocument) */
  showGraph: 'aoti.showGraph',
  /** open the failing kernel's document (window/showDocument) */
  showKernel: 'aoti.showKernel',
  /** open the shrink picture: nodes over time, checkpoints as points, and the final graph */
  showShrink: 'aoti.showShrink',
  /** write report.md beside repro.py (a PyTorch bug report: `aoti-minify report`) and open it */
  report: 'aoti.report',
  /** find a workaround verified on the original and name the culprit (`aoti-minify triage`) */
  triage: 'aoti.triage',
  /** run the minimal repro under other torch releases (`aoti-minify versions`): which have it */
  versions: 'aoti.versions',
} as const;

export const SERVER_COMMAND_IDS: readonly string[] = Object.values(ServerCommands);

/** Server commands whose arguments are `[fileUri]`. */
export const FileCommands = {
  /** run the script (or settings.captureCommand) under `aoti-minify capture` in the background; the VS Code client runs it in a terminal instead */
  capture: 'aoti.capture',
} as const;

export type FailureState = 'found' | 'reproducing' | 'reproduced' | 'minifying' | 'minimized' | 'cancelled' | 'error';

export const FAILURE_STATES: readonly FailureState[] = ['found', 'reproducing', 'reproduced', 'minifying', 'minimized', 'cancelled', 'error'];

/** States in which a job (an `aoti-minify` child process) runs. */
export const RUNNING_STATES: readonly FailureState[] = ['reproducing', 'minifying'];

/** Why Minify and Reproduce do nothing in an untrusted workspace. */
export const UNTRUSTED_TEXT = 'aoti-lens runs nothing in an untrusted workspace: reproducing or minifying executes this workspace\'s minifier_launcher.py. Trust the workspace (Workspaces: Manage Workspace Trust) to reproduce and minify its failures.';

/** What an aoti-lens client announces in InitializeParams.capabilities.experimental. */
export interface ClientCapability {
  /** the client's PROTOCOL_VERSION */
  protocolVersion: number;
}

export interface ServerCapability {
  /** the server's PROTOCOL_VERSION */
  protocolVersion: number;
  /** the aoti-lens package the server runs from */
  packageVersion: string;
  /** what the client announced (null: nothing, not an aoti-lens client) */
  clientProtocolVersion: number | null;
}

export interface CaptureParams {
  /** file URI of the script */
  uri: string;
}

export interface CaptureCommand {
  /** `python -m minifier capture --dir <folder> -- <the script's command line>` */
  argv: string[];
  /** the script's workspace folder */
  cwd: string;
  /** a name for the terminal */
  title: string;
}

export interface FailureItem {
  /** the run folder's name, e.g. "run_2026_11_29_16_34_13_593805-pid_1859" (unique per server) */
  id: string;
  /** short text for the tree: the signature's headline, or "AOTI failure" / "torch.compile failure" */
  label: string;
  /** absolute path of torch_compile_debug/run_* */
  runDir: string;
  /** file URI of minifier_launcher.py */
  launcher: string;
  state: FailureState;
  /** e.g. "CppCompileError: 'compile' was not declared in this scope" */
  signature: string | null;
  /** compile_error, runtime_error, accuracy, crash or timeout */
  kind: string | null;
  /** nodes of the graph the minification started from */
  nodesStart: number | null;
  /** nodes of the smallest failing graph so far */
  nodesNow: number | null;
  /** candidates compiled and run */
  queries: number | null;
  /** the minification's time so far */
  seconds: number | null;
  /** human status or error text ("73 -> 12 nodes, 9 queries, 41 s") */
  message: string | null;
  /** file URI of repro.py, once minimized */
  repro: string | null;
  /** the shrinking graph document */
  graphUri: string;
  /** the failing kernel's document, when the failure names a kernel */
  kernelUri: string | null;
  /** the shrink picture (Markdown: nodes over time, the final graph) */
  shrinkUri: string;
  /** file URI of report.md, once written */
  report: string | null;
  /** pid of an aoti-minify started outside this server (a terminal) that works on it now */
  externalPid: number | null;
  /** who compiled the failing graph: "aoti_compile_and_package" or "torch.compile" */
  compiler: string | null;
}

export interface FailureList {
  failures: FailureItem[];
}

/** `initializationOptions`, and `workspace/didChangeConfiguration`'s settings (`Settings` or `{aoti: Settings}`). */
export interface Settings {
  /** interpreter that runs aoti-minify */
  python?: string;
  /** parallel minifier workers (null: the minifier's default) */
  workers?: number;
  /** GPU ids the workers may use, e.g. "0,1" ("": all visible) */
  devices?: string;
  /** seconds one candidate may run (null: the minifier's default) */
  timeout?: number;
  /** seconds a process with torch imported waits for the next job (0: start cold) */
  keepWarm?: number;
  /** more folders to scan for dumps (relative: to the first workspace folder) */
  debugDirRoots?: string[];
  /** modules every minifier worker imports first (custom-op libraries): --import */
  imports?: string[];
  /** run `aoti-minify run` on discovery (never when untrusted) */
  autoReproduce?: boolean;
  /** what Capture runs instead of `python <file>` ("": that); `${file}`: the script */
  captureCommand?: string;
  /** VS Code's workspace trust; nothing runs until it is true */
  trusted?: boolean;
}

/** The server's defaults, but for python (machine-dependent). */
export const DEFAULT_SETTINGS = {
  workers: null,
  devices: '',
  timeout: null,
  keepWarm: 600,
  debugDirRoots: [],
  imports: [],
  autoReproduce: true,
  captureCommand: '',
  trusted: false,
} as const;

/** URI templates of the virtual documents: `{id}` is a FailureItem's id. */
export const VIRTUAL_DOCS = {
  /** the smallest failing graph so far, refreshed at every checkpoint */
  graph: 'aoti:/{id}/graph.py',
  /** the graph the minification started from */
  original: 'aoti:/{id}/original.py',
  /** the failing kernel's source, its error line marked */
  kernel: 'aoti:/{id}/kernels/{kernel}.py',
  /** the shrink curve (nodes over time, each checkpoint a point) and the final graph */
  shrink: 'aoti:/{id}/shrink.md',
} as const;
