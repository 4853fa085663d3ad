"""One principal's answers from one state: where an item lives, the check every subject
agrees with, lists, aggregates, who can see, warnings."""
