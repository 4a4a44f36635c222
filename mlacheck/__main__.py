from mlacheck.cli import main

main()
