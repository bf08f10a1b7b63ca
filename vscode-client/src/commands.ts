// Running the server's commands from VS Code: the failure comes from the tree element, the argument or
// a pick; the untrusted refusal comes before the server is asked; errors are shown. Plus the client's
// "Cancel running job".
import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import type { FailuresView } from './failuresView';
import { candidatesFor, commandArguments, pickLabel, scriptArgument } from './presentation';
import { FileCommands, Methods, ServerCommands, type CaptureCommand, type FailureItem } from './protocol';
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

/**
 * "Capture AOTI failures of this script": the server builds the command line (`aoti-minify capture` around the
 * script or aoti.captureCommand), the user watches it in a terminal; the failures reach the view as dumped.
 */
export async function runCapture(client: LanguageClient, args: unknown[]): Promise<void> {
  const script = scriptArgument(args) ?? vscode.window.activeTextEditor?.document.uri.toString();
  if (!script || !script.endsWith('.py')) {
    void vscode.window.showInformationMessage('aoti-lens: open the Python script to capture (one that compiles with AOTInductor).');
    return;
  }
  if (await refusedUntrusted(FileCommands.capture)) return;
  let command: CaptureCommand;
  try {
    command = await client.sendRequest<CaptureCommand>(Methods.captureCommand, { uri: script });
  } catch (e) {
    void vscode.window.showErrorMessage(`aoti-lens: cannot capture ${script}: ${e instanceof Error ? e.message : String(e)}`);
    return;
  }
  const [shellPath, ...shellArgs] = command.argv;
  const terminal = vscode.window.createTerminal({ name: command.title, shellPath, shellArgs, cwd: command.cwd });
  terminal.show(true);
}
