"""The rules engine: schema, loading, and the three pure stages.

- ``schema``: the pydantic models of rule files and tables (what docs/rules.md describes);
- ``loader``: reads rule directories into a ``RuleSet`` (the only module here that reads files);
- ``compiled``: the compiled ``RuleSet`` and extractor types the stages run on;
- ``extract`` -> ``correlate`` -> ``diagnose``: lines to events, events to relations,
  relations to a verdict (with ``conditions`` and ``template`` shared by the last two);
- ``lint`` and ``examples``: ``sattr rules lint`` and the rules' inline examples.
"""
