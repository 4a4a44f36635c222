"""The CLI's commands that are not a report: `mlacheck rules` (rules_table), `mlacheck rule CODE` (rule_page),
`mlacheck rules --template MODULE` (rule_template), the progress display of a run (progress), and where the CLI
prints (consoles)."""
