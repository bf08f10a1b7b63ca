// The status-bar item while jobs run (server progress has no cancel button there): clicking it
// runs "Cancel running job".
import * as vscode from 'vscode';
import type { FailuresView } from './failuresView';
import { ClientCommands, Contexts } from './manifest';
import { statusText } from './presentation';

export function jobsStatusItem(view: FailuresView): vscode.Disposable {
  const item = vscode.window.createStatusBarItem('aoti-lens.jobs', vscode.StatusBarAlignment.Left, 50);
  item.name = 'aoti-lens jobs';
  item.command = ClientCommands.cancelRunning;
  const update = () => {
    const status = statusText(view.failures);
    void vscode.commands.executeCommand('setContext', Contexts.jobsRunning, status !== null);
    if (!status) {
      item.hide();
      return;
    }
    item.text = status.text;
    item.tooltip = status.tooltip;
    item.show();
  };
  return vscode.Disposable.from(item, view.onDidChangeTreeData(update));
}
