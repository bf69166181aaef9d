"""What production gets from speculation: SGLang's own per-request records, read and summarised.

`records` parses one line of each format SGLang writes, `reader` walks files and directories (bounded, every
unusable record counted with its reason), `follow` follows them live (new hourly files, rotated or truncated
logs), `summary` aggregates τ per class with CIs and finds outliers, `window` keeps the last minutes of it, `locate`
finds a server's records from its flags, `cli` is `specmon traffic` and `once` adds traffic to `monitor --once`."""
