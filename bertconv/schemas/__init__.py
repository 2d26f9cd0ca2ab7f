"""JSON Schemas (draft 2020-12) of every command's `--json` output, one file per command and
`common.json` for what they share; `commands.output.schema(name)` loads one."""
