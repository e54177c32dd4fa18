"""The Textual TUI wizard (`gpuadvisor tui`): hardware -> model -> goal -> results -> confirm -> export.

Every screen calls `gpuadvisor.api` (and the stage entry points it composes); the TUI holds state and
draws it, it has no advice logic of its own. Importing this package imports textual: the CLI imports it
lazily, only for `gpuadvisor tui`.
"""
