// The language server <-> client contract (docs/protocol.md), client side.
// The server's twin is server/protocol.py: change both together.

export const PROTOCOL_VERSION = 1;

export type FailureState =
  | 'found'
  | 'reproducing'
  | 'reproduced'
  | 'minifying'
  | 'minimized'
  | 'cancelled'
  | 'error';

export const FAILURE_STATES: readonly FailureState[] = [
  'found',
  'reproducing',
  'reproduced',
  'minifying',
  'minimized',
  'cancelled',
  'error',
];

/** States in which a job (an `aoti-minify` child process) runs for the failure. */
export const RUNNING_STATES: readonly FailureState[] = ['reproducing', 'minifying'];

export interface FailureItem {
  id: string;
  label: string;
  runDir: string;
  launcher: string;
  state: FailureState;
  signature: string | null;
  kind: string | null;
  nodesStart: number | null;
  nodesNow: number | null;
  queries: number | null;
  seconds: number | null;
  message: string | null;
  repro: string | null;
  graphUri: string;
  kernelUri: string | null;
}

export interface FailureList {
  failures: FailureItem[];
}

export interface Settings {
  python?: string;
  workers?: number;
  devices?: string;
  timeout?: number;
  keepWarm?: number;
  debugDirRoots?: string[];
  imports?: string[];
  autoReproduce?: boolean;
  trusted?: boolean;
}

/** Custom LSP methods. */
export const Methods = {
  failures: 'aoti/failures',
  failuresChanged: 'aoti/failuresChanged',
} as const;

/** Server commands (advertised in executeCommandProvider; vscode-languageclient registers them). */
export const ServerCommands = {
  minify: 'aoti.minify',
  reproduce: 'aoti.reproduce',
  cancel: 'aoti.cancel',
  openRepro: 'aoti.openRepro',
  showGraph: 'aoti.showGraph',
  showKernel: 'aoti.showKernel',
} as const;

export const SERVER_COMMAND_IDS: readonly string[] = Object.values(ServerCommands);

/** The extension's own commands (never advertised by the server). */
export const ClientCommands = {
  cancelRunning: 'aoti-lens.cancelRunning',
  refresh: 'aoti-lens.refresh',
  restart: 'aoti-lens.restart',
  showOutput: 'aoti-lens.showOutput',
} as const;

export const VIEW_ID = 'aoti.failures';
