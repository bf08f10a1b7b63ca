def main() -> None:
    raise SystemExit("aoti-lsp: not built yet")


if __name__ == "__main__":
    main()
