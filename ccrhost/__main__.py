from ccrhost.console import entry

entry()
