"""The native tier's stand-in for the bindings componentize-py generates from
`guest/wit/sandpy.wit`: the same names, over the channel to the host
(`sandpy_native`), so that `sandpy_guest` runs unchanged in both tiers."""
