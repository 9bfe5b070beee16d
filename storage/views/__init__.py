"""What every catalog view and its columns mean (`augdag views`, the shell's `.views`), by pipeline."""
