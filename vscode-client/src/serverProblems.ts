// What the user sees when the server cannot run: the view's "Language server not running" row and
// one notification per start attempt, never a loop (the user fixes the interpreter; a settings
// change restarts). Also the warning for an interpreter without torch.
import * as vscode from 'vscode';
import type { FailuresView } from './failuresView';
import { ClientCommands } from './manifest';
import { SETTINGS_SECTION } from './protocol';
import { installCommand } from './python';

const NOTICE_KEY = 'server';

function openPythonSetting(): Thenable<unknown> {
  return vscode.commands.executeCommand('workbench.action.openSettings', `${SETTINGS_SECTION}.python`);
}

export class ServerProblems {
  private shown = false;

  constructor(
    private readonly view: FailuresView,
    private readonly output: vscode.LogOutputChannel,
    private readonly restart: () => Promise<void>,
  ) {}

  /** A new start attempt may notify again. */
  reset(): void {
    this.shown = false;
  }

  running(): void {
    this.view.setNotice(null, NOTICE_KEY);
  }

  down(reason: string): void {
    this.view.setNotice({
      key: NOTICE_KEY,
      label: 'Language server not running',
      detail: reason,
      icon: 'debug-disconnect',
      command: { title: 'Show server log', command: ClientCommands.showOutput },
    });
    this.view.update([]);
  }

  /** The one notification of this start attempt; later ones only reach the log. */
  async notify(text: string, fixCommand?: string, offerRestart = false): Promise<void> {
    if (this.shown) return;
    this.shown = true;
    const buttons = [...(fixCommand ? ['Copy Command'] : []), ...(offerRestart ? ['Restart'] : []), 'Open Settings', 'Show Log'];
    const choice = await vscode.window.showErrorMessage(text, ...buttons);
    if (choice === 'Copy Command' && fixCommand) await vscode.env.clipboard.writeText(fixCommand);
    else if (choice === 'Restart') await this.restart();
    else if (choice === 'Open Settings') await openPythonSetting();
    else if (choice === 'Show Log') this.output.show(true);
  }

  /** The one notification of a version mismatch (per server start). */
  async mismatch(text: string, fixCommand?: string): Promise<void> {
    const choice = await vscode.window.showWarningMessage(text, ...(fixCommand ? ['Copy Command'] : []), 'Open Settings', 'Show Log');
    if (choice === 'Copy Command' && fixCommand) await vscode.env.clipboard.writeText(fixCommand);
    else if (choice === 'Open Settings') await openPythonSetting();
    else if (choice === 'Show Log') this.output.show(true);
  }

  noTorch(python: string): void {
    void vscode.window
      .showWarningMessage(
        `aoti-lens: ${python} has no torch: failures are listed, but reproducing and minifying need torch in this interpreter (${installCommand(python, 'torch')}).`,
        'Open Settings',
      )
      .then((choice) => choice && openPythonSetting());
  }
}
