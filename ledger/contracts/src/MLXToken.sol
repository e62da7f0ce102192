// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";

/// @title MLX, the MLX Network token: 9 decimals, like the ledger's base units.
/// @notice Only the minter (the payout distributor) creates tokens, and it is set once,
/// so the supply is exactly what the anchored epochs paid out.
contract MLXToken is ERC20 {
    address public immutable deployer;
    address public minter;

    error MinterAlreadySet();
    error NotDeployer();
    error NotMinter();

    constructor() ERC20("MLX Network", "MLX") {
        deployer = msg.sender;
    }

    function decimals() public pure override returns (uint8) {
        return 9;
    }

    /// @notice Hand minting to the distributor, once; nobody can change it afterwards.
    function setMinter(address distributor) external {
        if (msg.sender != deployer) revert NotDeployer();
        if (minter != address(0)) revert MinterAlreadySet();
        minter = distributor;
    }

    function mint(address to, uint256 amount) external {
        if (msg.sender != minter) revert NotMinter();
        _mint(to, amount);
    }
}
