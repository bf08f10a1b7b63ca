// How failures look in the tree and the status bar, and how command arguments are normalized.
// No vscode import: unit-tested under plain node.
import { RUNNING_STATES, SERVER_COMMAND_IDS, ServerCommands, type FailureItem, type FailureState } from './protocol';

export interface ItemLook {
  label: string;
  description: string;
  tooltip: string; // markdown
  contextValue: string;
  icon: string; // codicon id
  iconColor?: string; // theme color id
}

const STATE_TEXT: Record<FailureState, string> = {
  found: 'found',
  reproducing: 'reproducing…',
  reproduced: 'reproduced',
  minifying: 'minifying…',
  minimized: 'minimized',
  cancelled: 'cancelled',
  error: 'error',
};

const STATE_ICON: Record<FailureState, [string, string?]> = {
  found: ['bug'],
  reproducing: ['sync~spin'],
  reproduced: ['error', 'problemsErrorIcon.foreground'],
  minifying: ['sync~spin'],
  minimized: ['pass', 'testing.iconPassed'],
  cancelled: ['circle-slash'],
  error: ['warning', 'problemsWarningIcon.foreground'],
};

export function stateText(state: string): string {
  return STATE_TEXT[state as FailureState] ?? state;
}

/** The state as the tree says it: a minification that removed nothing is not called "minimized". */
export function failureStateText(f: Pick<FailureItem, 'state' | 'nodesStart' | 'nodesNow'>): string {
  const unreduced = f.state === 'minimized' && count(f.nodesStart) !== null && f.nodesStart === f.nodesNow;
  return unreduced ? 'nothing removed' : stateText(f.state);
}

function count(n: number | null | undefined): number | null {
  return typeof n === 'number' && Number.isFinite(n) ? n : null;
}

/** "73 -> 12 nodes", "73 nodes", "1 node" or "" when the server knows no count yet. */
export function nodeCount(f: Pick<FailureItem, 'nodesStart' | 'nodesNow'>): string {
  const start = count(f.nodesStart);
  const now = count(f.nodesNow);
  const plural = (n: number) => (n === 1 ? 'node' : 'nodes');
  if (start !== null && now !== null && start !== now) return `${start} -> ${now} ${plural(now)}`;
  const one = now ?? start;
  return one === null ? '' : `${one} ${plural(one)}`;
}

export function isRunning(f: Pick<FailureItem, 'state'>): boolean {
  return RUNNING_STATES.includes(f.state);
}

/** Context value matched by package.json `when` clauses: aoti.failure.<state>[.repro][.kernel]. */
export function contextValue(f: Pick<FailureItem, 'state' | 'repro' | 'kernelUri'>): string {
  let value = `aoti.failure.${f.state}`;
  if (f.repro) value += '.repro';
  if (f.kernelUri) value += '.kernel';
  return value;
}

function mdEscape(text: string): string {
  return text.replace(/([\\`*_{}[\]()#+\-.!|<>])/g, '\\$1');
}

/** What failed, by who compiled it: AOTInductor's packages or torch.compile. */
export function failureNoun(f: Pick<FailureItem, 'compiler'>): string {
  return f.compiler === 'torch.compile' ? 'torch.compile failure' : 'AOTI failure';
}

export function describeFailure(f: FailureItem): ItemLook {
  const [icon, iconColor] = STATE_ICON[f.state] ?? ['question'];
  const parts = [failureStateText(f)];
  if (f.compiler === 'torch.compile') parts.push('torch.compile');
  const nodes = nodeCount(f);
  if (nodes) parts.push(nodes);
  if (count(f.externalPid) !== null) parts.push(`in a terminal (pid ${f.externalPid})`);
  const lines = [`**${mdEscape(f.label || failureNoun(f))}**`, ''];
  lines.push(`State: ${failureStateText(f)}${nodes ? ` (${nodes})` : ''}`);
  if (f.signature) lines.push('', `Signature: \`${f.signature.replace(/`/g, "'")}\``);
  if (f.kind) lines.push('', `Kind: ${mdEscape(f.kind)}`);
  if (f.compiler) lines.push('', `Compiled by: \`${f.compiler}\``);
  if (f.message) lines.push('', mdEscape(f.message));
  const stats: string[] = [];
  if (count(f.queries) !== null) stats.push(`${f.queries} queries`);
  if (count(f.seconds) !== null) stats.push(`${Math.round(f.seconds as number)} s`);
  if (stats.length) lines.push('', stats.join(', '));
  lines.push('', `Run: \`${f.runDir}\``);
  return {
    label: f.label || f.signature || failureNoun(f),
    description: parts.join(' · '),
    tooltip: lines.join('\n'),
    contextValue: contextValue(f),
    icon,
    iconColor,
  };
}

/** The status-bar text while jobs run, or null when none does. */
export function statusText(failures: readonly FailureItem[]): { text: string; tooltip: string } | null {
  const running = failures.filter(isRunning);
  if (running.length === 0) return null;
  if (running.length === 1) {
    const f = running[0];
    const verb = f.state === 'minifying' ? 'minifying' : 'reproducing';
    const start = count(f.nodesStart);
    const now = count(f.nodesNow);
    const nodes = start !== null && now !== null ? ` ${start} -> ${now}` : start !== null ? ` ${start} nodes` : '';
    return {
      text: `$(sync~spin) AOTI: ${verb}${nodes}`,
      tooltip: `aoti-lens: ${verb} ${f.label}${f.message ? ` (${f.message})` : ''}. Click to cancel.`,
    };
  }
  return {
    text: `$(sync~spin) AOTI: ${running.length} jobs`,
    tooltip: `aoti-lens: ${running.map((f) => `${f.state} ${f.label}`).join('; ')}. Click to cancel one.`,
  };
}

/** A line of a quick pick offering a failure. */
export function pickLabel(f: FailureItem): { label: string; description: string; detail: string } {
  return { label: f.label || failureNoun(f), description: describeFailure(f).description, detail: f.runDir };
}

function looksLikeFailure(value: unknown): value is { id: string } {
  return typeof value === 'object' && value !== null && typeof (value as { id?: unknown }).id === 'string';
}

/**
 * Server commands take `[failureId]`. From a tree context menu VS Code passes the tree element (a
 * FailureItem) and the selection; from a code action or the server itself the id already is a
 * string. Returns the argument list to send, or null when the id is missing (the palette: the
 * caller asks the user).
 */
export function commandArguments(command: string, args: readonly unknown[]): unknown[] | null {
  if (!SERVER_COMMAND_IDS.includes(command)) return [...args];
  // A tree context menu passes (element, selectedElements): the server takes exactly [failureId].
  const [first] = args;
  if (typeof first === 'string' && first) return [first];
  if (looksLikeFailure(first)) return [first.id];
  return null;
}

/** Which failures a command applies to when the user must pick one. */
export function candidatesFor(command: string, failures: readonly FailureItem[]): FailureItem[] {
  switch (command) {
    case ServerCommands.cancel:
      return failures.filter(isRunning);
    case ServerCommands.openRepro:
    case ServerCommands.report:
    case ServerCommands.versions:
      return failures.filter((f) => !!f.repro);
    case ServerCommands.showKernel:
      return failures.filter((f) => !!f.kernelUri);
    case ServerCommands.minify:
    case ServerCommands.reproduce:
      return failures.filter((f) => !isRunning(f));
    default:
      return [...failures];
  }
}

/**
 * The script a file command applies to: from the editor context menu VS Code passes a Uri, from a code lens
 * or the server a string; undefined from the palette (the caller takes the active editor's).
 */
export function scriptArgument(args: readonly unknown[]): string | undefined {
  const [first] = args;
  if (typeof first === 'string' && first) return first;
  if (typeof first === 'object' && first !== null && typeof (first as { scheme?: unknown }).scheme === 'string') return (first as { toString(): string }).toString();
  return undefined;
}
