"""Each table and figure ``istar-report`` writes, one module each: the I-STAR paper's Tables 1 and 2
(:mod:`.istar_table1`, :mod:`.istar_table2`) and Figures 2, 3, 7 and 8 (:mod:`.istar_figure2`,
:mod:`.istar_figure3`, :mod:`.zeta_and_layer_figures`), the penalised layers' IsoScore* (:mod:`.penalised_layers`),
the evaluations over training steps (:mod:`.eval_curves`), the cells' wall times (:mod:`.wall_times`) and where
they ran (:mod:`.provenance_table`), the sentence-embedding table (:mod:`.sentence_embedding_table`), the Isotropy
Layer paper's Table 3 (:mod:`.isolayer_table3`), Ding et al.'s calibration tables (:mod:`.calibration_tables`),
``istar-analyze``'s summary (:mod:`.analysis_table`) and ``istar-embed``'s table (:mod:`.embedding_table`)."""
