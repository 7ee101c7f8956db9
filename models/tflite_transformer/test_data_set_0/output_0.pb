
BStatefulPartitionedCall_1:0J(xÂì;=s–=i°Ô>ƒð>þú:É€=<»<°²O;¡`6mí$4