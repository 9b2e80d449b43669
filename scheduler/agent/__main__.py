from scheduler.agent import main

main()
