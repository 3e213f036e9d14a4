from ccrhost.cli import main

main()
