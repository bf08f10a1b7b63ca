// The "Inductor Failures" tree (AOTI and torch.compile): a thin view of the server's FailureList.
import * as vscode from 'vscode';
import type { FailureItem } from './protocol';
import { describeFailure } from './presentation';

/** A row that is not a failure: why nothing runs (untrusted workspace, server not running). */
export interface Notice {
  kind: 'notice';
  key: string;
  label: string;
  detail: string;
  icon: string;
  command?: vscode.Command;
}

export type Node = FailureItem | Notice;

function isNotice(node: Node): node is Notice {
  return (node as Notice).kind === 'notice';
}

export class FailuresView implements vscode.TreeDataProvider<Node> {
  private readonly changed = new vscode.EventEmitter<Node | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private items: FailureItem[] = [];
  private notices = new Map<string, Notice>();

  get failures(): readonly FailureItem[] {
    return this.items;
  }

  update(failures: FailureItem[]): void {
    this.items = Array.isArray(failures) ? failures : [];
    this.changed.fire(undefined);
  }

  setNotice(notice: Omit<Notice, 'kind'> | null, key?: string): void {
    if (notice) this.notices.set(notice.key, { kind: 'notice', ...notice });
    else if (key) this.notices.delete(key);
    this.changed.fire(undefined);
  }

  getChildren(element?: Node): Node[] {
    if (element) return [];
    return [...this.notices.values(), ...this.items];
  }

  getTreeItem(node: Node): vscode.TreeItem {
    if (isNotice(node)) {
      const item = new vscode.TreeItem(node.label, vscode.TreeItemCollapsibleState.None);
      item.id = `notice:${node.key}`;
      item.tooltip = node.detail;
      item.description = node.detail;
      item.iconPath = new vscode.ThemeIcon(node.icon);
      item.contextValue = 'aoti.notice';
      item.command = node.command;
      return item;
    }
    const look = describeFailure(node);
    const item = new vscode.TreeItem(look.label, vscode.TreeItemCollapsibleState.None);
    item.id = `failure:${node.id}`;
    item.description = look.description;
    item.tooltip = new vscode.MarkdownString(look.tooltip);
    item.contextValue = look.contextValue;
    item.iconPath = new vscode.ThemeIcon(look.icon, look.iconColor ? new vscode.ThemeColor(look.iconColor) : undefined);
    item.resourceUri = undefined;
    try {
      item.command = { title: 'Open launcher', command: 'vscode.open', arguments: [vscode.Uri.parse(node.launcher)] };
    } catch {
      item.command = undefined;
    }
    return item;
  }
}
