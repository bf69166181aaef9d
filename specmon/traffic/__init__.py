"""What production gets from speculation: SGLang's own per-request records, read and summarised.

`records` parses one line of each format SGLang writes, `reader` walks files and directories (bounded, every
unusable record counted with its reason), `summary` aggregates τ per class with CIs and finds outliers, `cli` is
`specmon traffic`."""
