"""specmon's application package: the CLI, the Textual app and its UI-free core."""
