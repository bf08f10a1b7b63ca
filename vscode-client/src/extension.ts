// aoti-lens VS Code extension: starts the Python language server and shows what it reports.
// Thin on purpose: the server discovers, reproduces and minifies. This file only wires the parts:
// server.ts (the language client's life), python.ts (the interpreter), failuresView.ts (the tree),
// statusBar.ts, commands.ts, trust.ts.
import * as vscode from 'vscode';
import { cancelRunning } from './commands';
import { FailuresView } from './failuresView';
import { ClientCommands, NAME, VIEW_ID } from './manifest';
import { Server } from './server';
import { jobsStatusItem } from './statusBar';
import { followTrust } from './trust';

let server: Server | undefined;

export function activate(context: vscode.ExtensionContext): void {
  const output = vscode.window.createOutputChannel(NAME, { log: true });
  const view = new FailuresView();
  const version = String((context.extension.packageJSON as { version?: string }).version ?? 'unknown');
  const running = new Server(context.extensionPath, version, output, view);
  server = running;
  context.subscriptions.push(
    output,
    running,
    jobsStatusItem(view),
    vscode.window.createTreeView(VIEW_ID, { treeDataProvider: view, showCollapseAll: false }),
    vscode.commands.registerCommand(ClientCommands.cancelRunning, () => cancelRunning(view)),
    vscode.commands.registerCommand(ClientCommands.refresh, () => running.refresh()),
    vscode.commands.registerCommand(ClientCommands.restart, () => running.restart()),
    vscode.commands.registerCommand(ClientCommands.showOutput, () => output.show(true)),
    vscode.workspace.onDidChangeConfiguration((e) => running.settingsChanged(e)),
    followTrust(view, running),
  );
  void running.restart(); // activation does not wait for the interpreter probe and the server
}

export async function deactivate(): Promise<void> {
  await server?.stop();
  server = undefined;
}
