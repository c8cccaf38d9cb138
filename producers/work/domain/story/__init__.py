"""Story generation, the first work function: the stories of one epic of a story backlog
(its prompt, the validation of an answer, the ``replace_epic_stories`` mutation)."""
