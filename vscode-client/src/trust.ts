// Workspace trust: a minifier launcher is code, so nothing runs until VS Code trusts the workspace.
// The server enforces it (Settings.trusted); the extension says so in the view and before it asks.
import * as vscode from 'vscode';
import type { FailuresView } from './failuresView';
import { FileCommands, SETTINGS_SECTION, ServerCommands, UNTRUSTED_TEXT } from './protocol';

const MANAGE_TRUST = { title: 'Manage Workspace Trust', command: 'workbench.trust.manage' };
const NOTICE = {
  key: 'trust',
  label: 'Restricted Mode: nothing runs',
  detail: 'trust the workspace to reproduce and minify',
  icon: 'shield',
  command: MANAGE_TRUST,
};
const RUN_THE_LAUNCHER: readonly string[] = [ServerCommands.minify, ServerCommands.reproduce, FileCommands.capture];

/** What the server must hear when trust is granted: a restart, or only the new settings. */
export interface TrustFollower {
  restart(): Promise<void>;
  sendSettings(): void;
}

function showNotice(view: FailuresView): void {
  view.setNotice(vscode.workspace.isTrusted ? null : NOTICE, NOTICE.key);
}

/** aoti.python is a restricted setting: a workspace value counts only once trusted, and changes the interpreter. */
function workspaceSetsPython(): boolean {
  const inspected = vscode.workspace.getConfiguration(SETTINGS_SECTION).inspect<string>('python');
  return !!(inspected?.workspaceValue || inspected?.workspaceFolderValue);
}

/** Shows the Restricted Mode notice while untrusted, and tells the server when trust is granted. */
export function followTrust(view: FailuresView, server: TrustFollower): vscode.Disposable {
  showNotice(view);
  return vscode.workspace.onDidGrantWorkspaceTrust(() => {
    showNotice(view);
    if (workspaceSetsPython()) void server.restart();
    else server.sendSettings();
  });
}

/** True (after saying why) when `command` would run the launcher of an untrusted workspace. */
export async function refusedUntrusted(command: string): Promise<boolean> {
  if (vscode.workspace.isTrusted || !RUN_THE_LAUNCHER.includes(command)) return false;
  const choice = await vscode.window.showWarningMessage(UNTRUSTED_TEXT, MANAGE_TRUST.title);
  if (choice) await vscode.commands.executeCommand(MANAGE_TRUST.command);
  return true;
}
