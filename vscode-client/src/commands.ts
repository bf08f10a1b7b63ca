// Running the server's commands from VS Code: the failure comes from the tree element, the argument or
// a pick; the untrusted refusal comes before the server is asked; errors are shown. Plus the client's
// "Cancel running job".
import * as vscode from 'vscode';
import type { FailuresView } from './failuresView';
import { candidatesFor, commandArguments, pickLabel } from './presentation';
import { ServerCommands, type FailureItem } from './protocol';
import { refusedUntrusted } from './trust';

type Next = (command: string, args: unknown[]) => unknown;

async function pick(failures: readonly FailureItem[], placeHolder: string, label = (f: FailureItem) => pickLabel(f).label) {
  const items = failures.map((f) => ({ ...pickLabel(f), label: label(f), failure: f }));
  return (await vscode.window.showQuickPick(items, { placeHolder }))?.failure;
}

/** `[failureId]` for the server, or undefined when there is none to apply the command to. */
async function argumentsFor(command: string, args: unknown[], failures: readonly FailureItem[]): Promise<unknown[] | undefined> {
  const given = commandArguments(command, args);
  if (given !== null) return given;
  const candidates = candidatesFor(command, failures);
  if (candidates.length === 0) {
    void vscode.window.showInformationMessage('aoti-lens: no AOTI failure to apply this to.');
    return undefined;
  }
  const failure = candidates.length === 1 ? candidates[0] : await pick(candidates, 'Which AOTI failure?');
  return failure && [failure.id];
}

/** The language client's executeCommand middleware. */
export function serverCommands(view: FailuresView, log: (text: string) => void) {
  return async (command: string, args: unknown[], next: Next): Promise<unknown> => {
    const sendArgs = await argumentsFor(command, args, view.failures);
    if (!sendArgs || (await refusedUntrusted(command))) return undefined;
    try {
      return await next(command, sendArgs);
    } catch (e) {
      const text = e instanceof Error ? e.message : String(e);
      log(`${command} failed: ${text}`);
      void vscode.window.showErrorMessage(`aoti-lens: ${command} failed: ${text}`);
      return undefined;
    }
  };
}

export async function cancelRunning(view: FailuresView): Promise<void> {
  const running = candidatesFor(ServerCommands.cancel, view.failures);
  if (running.length === 0) {
    void vscode.window.showInformationMessage('aoti-lens: no job is running.');
    return;
  }
  const failure = await pick(running, 'Cancel which aoti-lens job?', (f) => `$(debug-stop) Cancel: ${f.label}`);
  if (failure) await vscode.commands.executeCommand(ServerCommands.cancel, failure.id);
}
