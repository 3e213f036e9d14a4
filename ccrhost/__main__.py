from ccrhost.cli import entry

entry()
