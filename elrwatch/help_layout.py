"""`--help` that shows every option's name whole, at any terminal width from 80 columns up.

typer (pinned below 0.27) lays each options panel out as a rich table of six columns (long name, short name, the
negative flag's two, type, help) and lets rich shrink every column alike when the terminal is narrower than the
table: at 80 columns `elrwatch api --help` read ``--ready-max-store-beh…`` and ``ELRWATCH_READY_MAX_S…``.
:class:`OptionsTable` takes the place of the table typer builds for an options panel (:func:`install`, called by
:class:`HelpCommand` when it formats a help, so that ``rich`` loads only then):

- the name columns never wrap and are never cropped: rich narrows the type and help columns instead;
- the type and help columns fold a word longer than the column (an environment variable's name) onto the next line
  rather than cropping it;
- a column no option fills (the negative flags', in a command without ``--x/--no-x`` flags) takes no room.

``tests/test_cli_options.py`` renders every command's help at 80 columns and fails on a cropped name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer.core

if TYPE_CHECKING:
    import click
    from rich.console import Console, ConsoleOptions, RenderResult

#: The last two columns of an options panel (type, help) wrap; the ones before them (names, the required mark) not.
_WRAPPING_COLUMNS = 2


def _options_table_class() -> type:
    """The table class (built on first use: rich is imported only when a help is formatted)."""
    from rich.columns import Columns
    from rich.table import Table
    from rich.text import Text

    class OptionsTable(Table):
        """typer's options table, laid out so that names are never cropped (see the module's docstring)."""

        def add_row(self, *renderables: Any, **kwargs: Any) -> None:
            """Add a row; on the first one, declare the columns: names unwrapped, type and help folding."""
            if not self.columns:
                for index in range(len(renderables)):
                    wraps = index >= len(renderables) - _WRAPPING_COLUMNS
                    self.add_column(no_wrap=not wraps, overflow="fold" if wraps else "ellipsis")
            help_cell = renderables[-1] if renderables else None
            if isinstance(help_cell, Columns):  # typer's help cell: the text, [env var: …], [default: …]
                for item in help_cell.renderables:
                    if isinstance(item, Text):
                        item.overflow = "fold"
            super().add_row(*renderables, **kwargs)

        def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
            """Render without the columns no row fills."""
            filled = [column for column in self.columns if any(not _is_blank(cell) for cell in column._cells)]
            if filled and len(filled) < len(self.columns):
                self.columns = filled
                for index, column in enumerate(self.columns):
                    column._index = index
            yield from super().__rich_console__(console, options)

    def _is_blank(cell: Any) -> bool:
        return (isinstance(cell, Text) and not cell.plain) or cell == ""

    return OptionsTable


def install() -> None:
    """Make typer build its options panels with :class:`OptionsTable` (idempotent)."""
    from rich.table import Table
    from typer import rich_utils

    if rich_utils.Table is Table:
        rich_utils.Table = _options_table_class()


class HelpCommand(typer.core.TyperCommand):
    """A command whose ``--help`` crops no option name (:func:`install`)."""

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Format the help with :class:`OptionsTable` as the options panels' table."""
        install()
        super().format_help(ctx, formatter)
