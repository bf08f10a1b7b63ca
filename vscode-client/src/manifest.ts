// The extension's own names that package.json declares and the server never sees. The LSP schema
// (server commands, settings) is protocol.ts; test/manifest.test.ts checks both against package.json.

export const NAME = 'aoti-lens';

/** The extension's own commands (never advertised by the server). */
export const ClientCommands = {
  cancelRunning: 'aoti-lens.cancelRunning',
  refresh: 'aoti-lens.refresh',
  restart: 'aoti-lens.restart',
  showOutput: 'aoti-lens.showOutput',
} as const;

export const VIEW_ID = 'aoti.failures';

/** Context keys of package.json's `when` clauses. */
export const Contexts = {
  serverRunning: 'aoti.serverRunning',
  jobsRunning: 'aoti.jobsRunning',
} as const;
